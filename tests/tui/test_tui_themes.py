"""Themes: colours only through theme variables, all themes load, NO_COLOR and 16-colour plots."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.color import COLOR_NAME_TO_RGB

import themes
from tests.tui.tui_helpers import loaded, make, pilot_test, wait_for


def test_stylesheets_use_no_literal_colours():
    literal = re.compile(r"#[0-9a-fA-F]{3,8}\b|\b(rgb|rgba|hsl|hsla)\(")
    names = {n for n in COLOR_NAME_TO_RGB if n not in ("transparent",)}
    for path in themes.CSS_PATHS:
        for number, line in enumerate(Path(path).read_text().splitlines(), 1):
            code = re.sub(r"/\*.*?\*/", "", line)
            if ":" not in code or "{" in code and "}" not in code:
                continue  # selectors (ids like #loss) are not values
            value = code.split(":", 1)[1]
            assert not literal.search(value), f"{path.name}:{number}: literal colour in {line.strip()!r}"
            words = set(re.findall(r"\b[a-z_]+\b", value))
            assert not words & names, f"{path.name}:{number}: named colour in {line.strip()!r}"


def test_unknown_theme_names_the_flag_and_the_choices():
    with pytest.raises(themes.ThemeError, match=r"^--theme 'neon': unknown theme; allowed: dark, light, "
                                               r"high-contrast, ansi$"):
        themes.resolve("neon")


@pytest.mark.slow
@pilot_test
async def test_every_theme_renders_and_the_palette_switches_it():
    app, _ = make(theme="light")
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        assert app.theme == "sensorlm-light"
        for name in themes.ALIASES:
            app.set_theme(name)
            await pilot.pause(0.05)
            app.redraw(force=True)
            plot = app.dashboard.query_one("#chart-1")
            plot.render()
            assert plot.error is None, name


@pilot_test
async def test_no_color_plots_carry_no_colour_and_ansi_plots_only_16_colours(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = make()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        plot = app.dashboard.query_one("#chart-1")
        await wait_for(pilot, lambda: plot.builds > 0, "first plot frame")
        assert app.no_color
        assert all(span.style in ("", None) or not span.style.color for span in plot.render().spans)
    monkeypatch.delenv("NO_COLOR")
    app, _ = make(ansi=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        plot = app.dashboard.query_one("#chart-1")
        await wait_for(pilot, lambda: plot.builds > 0, "first plot frame")
        colours = {span.style.color for span in plot.render().spans if span.style and span.style.color}
        assert colours and all(c.number is not None and c.number < 16 for c in colours)
