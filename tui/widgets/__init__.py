"""Dashboard panels: header, loss and PSNR plots, memory, progress, system, log, status line."""
