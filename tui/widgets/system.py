"""Host and GPU load: CPU %, RAM, and GPU utilisation / temperature / power where the engine reports them."""

from __future__ import annotations

from tui.model.format import bytes_pair
from tui.widgets.panel import TextPanel
from tui.widgets.ranks import rank_table


class SystemPanel(TextPanel):
    """The engine machine's load, from SystemSampled events (so it is right over SSH / attach too)."""

    area = "system"

    def content(self, model) -> str:
        s = model.system
        if s is None:
            return "[$text-muted]no system sample yet[/]"
        lines = [f"CPU {s.cpu_percent:.0f} %",
                 f"RAM {bytes_pair(s.ram_used, s.ram_total)}"]
        if s.gpu_util is None and s.gpu_temp_c is None and s.gpu_power_w is None:
            lines.append("[$text-muted]GPU: none reported[/]")
        else:
            if s.gpu_util is not None:
                lines.append(f"GPU {s.gpu_util:.0f} %")
            if s.gpu_temp_c is not None:
                hot = "$warning" if s.gpu_temp_c >= 80 else "$foreground"
                lines.append(f"GPU temp [{hot}]{s.gpu_temp_c:.0f} °C[/]")
            if s.gpu_power_w is not None:
                lines.append(f"GPU power {s.gpu_power_w:.0f} W")
        if model.ranks is not None:
            lines.append(rank_table(model.ranks))
        return "\n".join(lines)
