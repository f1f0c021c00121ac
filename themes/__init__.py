"""The dashboard's themes (dark, light, high-contrast, ansi) and its layout stylesheets.

Colours live only here, as Textual themes; ``*.tcss`` files hold layout and
refer to colours through theme variables ($primary, $warning, …), so a theme
switch (``--theme`` or the command palette) recolours everything, and
``NO_COLOR`` (which Textual honours by filtering every colour out) leaves a
layout that still reads. ``ansi`` uses the terminal's own 16 colours (and
truecolour escapes are never written) for slow links and old terminals.
"""

from __future__ import annotations

from pathlib import Path

from textual.theme import Theme

_HERE = Path(__file__).parent

#: Stylesheets, in cascade order.
CSS_PATHS = [_HERE / "dashboard.tcss", _HERE / "modals.tcss"]

#: Short names users type (``--theme``) → registered theme names.
ALIASES = {
    "dark": "sensorlm-dark",
    "light": "sensorlm-light",
    "high-contrast": "sensorlm-high-contrast",
    "ansi": "sensorlm-ansi",
}

THEMES: dict[str, Theme] = {
    "sensorlm-dark": Theme(
        name="sensorlm-dark", dark=True,
        primary="#4EA1FF", secondary="#9C8CF2", accent="#F5A623", warning="#F2C94C", error="#FF5C5C",
        success="#3DDC84", foreground="#E4E7EB", background="#101317", surface="#161A20", panel="#1F252D",
    ),
    "sensorlm-light": Theme(
        name="sensorlm-light", dark=False,
        primary="#0B5CAD", secondary="#6A3FB5", accent="#B45F06", warning="#8A6100", error="#C62828",
        success="#1B7F3B", foreground="#1A1C1E", background="#F5F5F2", surface="#FFFFFF", panel="#E6E6E1",
    ),
    # Pure colours on black, no mid-tones: for low vision and washed-out projectors.
    "sensorlm-high-contrast": Theme(
        name="sensorlm-high-contrast", dark=True, luminosity_spread=0.05, text_alpha=1.0,
        primary="#00E5FF", secondary="#FF4DFF", accent="#FFFF00", warning="#FFFF00", error="#FF3B3B",
        success="#00FF00", foreground="#FFFFFF", background="#000000", surface="#000000", panel="#000000",
    ),
    # The terminal's own palette: 16-colour escapes only.
    "sensorlm-ansi": Theme(
        name="sensorlm-ansi", dark=True, ansi=True,
        primary="ansi_blue", secondary="ansi_magenta", accent="ansi_cyan", warning="ansi_yellow",
        error="ansi_red", success="ansi_green", foreground="ansi_default", background="ansi_default",
        surface="ansi_default", panel="ansi_default", boost="ansi_default",
        variables={"ansi-background": "ansi_black", "ansi-foreground": "ansi_white",
                   "border-blurred": "ansi_bright_black", "block-cursor-foreground": "ansi_black",
                   "block-cursor-background": "ansi_white", "input-cursor-background": "ansi_white",
                   "input-cursor-foreground": "ansi_black", "input-selection-background": "ansi_bright_blue",
                   "screen-selection-background": "ansi_bright_blue",
                   "screen-selection-foreground": "ansi_black"},
    ),
}

#: The theme used when none is asked for.
DEFAULT = "dark"


class ThemeError(ValueError):
    """An unknown theme name; the message lists the allowed ones."""


def resolve(name: str | None) -> str:
    """A short or full theme name → the registered name; ThemeError naming --theme and what is allowed."""
    if name is None:
        name = DEFAULT
    if name in ALIASES:
        return ALIASES[name]
    if name in THEMES:
        return name
    raise ThemeError(f"--theme {name!r}: unknown theme; allowed: {', '.join(ALIASES)}")


def register(app) -> None:
    """Register every theme with a Textual app (call before setting ``app.theme``)."""
    for theme in THEMES.values():
        app.register_theme(theme)
