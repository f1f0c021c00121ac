"""What bench.baselines compares: its variants, how each is started, which ratios are the headline, and its sizes.

Kept apart from the measuring (bench.baselines) and the page text (bench.baselines_page), which both read it.
"""

from __future__ import annotations

PRESET, BATCH = "demo", 16
ENGINE, ENGINE_T2 = "engine, defaults", "engine, --threads 2"
DATALOADER, DATALOADER_2 = "DataLoader loop (1 worker)", "DataLoader loop (2 workers)"
LIGHTNING, LIGHTNING_2 = "Lightning (1 worker)", "Lightning (2 workers)"
INLINE = "inline loop (lower bound)"
DATALOADER_ENGINE = "DataLoader loop (1 worker) + the engine's fused AdamW and allocator settings"
#: Every round: the engine and the careful user's variants (the headline's ratios).
HEADLINE = (ENGINE, DATALOADER, DATALOADER_2, LIGHTNING, LIGHTNING_2)
#: The first ``extra_rounds`` rounds only: what explains the headline, not the headline itself.
EXTRAS = (ENGINE_T2, INLINE, DATALOADER_ENGINE)
VARIANTS = HEADLINE + EXTRAS
#: The variants run again beside the load generator.
LOADED = (ENGINE, DATALOADER, LIGHTNING, ENGINE_T2)
#: The careful variants the engine is judged against: the faster of each pair (median steps/s, quiet).
CAREFUL = {"DataLoader loop": (DATALOADER, DATALOADER_2), "Lightning": (LIGHTNING, LIGHTNING_2)}
#: Each loop variant: (bench.baseline_loops kind, its flags); each engine variant: its train flags.
LOOPS = {DATALOADER: ("dataloader", ()), DATALOADER_2: ("dataloader", ("--workers", "2")),
         LIGHTNING: ("lightning", ()), LIGHTNING_2: ("lightning", ("--workers", "2")), INLINE: ("inline", ()),
         DATALOADER_ENGINE: ("dataloader", ("--engine-settings",))}
ENGINES = {ENGINE: (), ENGINE_T2: ("--threads", "2")}
#: The suite's sizes: (steps a run, window, rounds, loaded rounds, rounds with the extras, cap on a run's seconds).
#: 100 steps: long enough that the engine plans worker processes, as a real run does (a 40-step run is too short
#: to repay their start: engine.training.threads gives it a builder thread); the window starts past their start-up.
SIZES = {"full": (100, (40, 95), 5, 3, 3, 40.0),  # ~13 min on 2 quiet cores
         "quick": (100, (40, 95), 3, 1, 1, 40.0),  # ~6 min
         "smoke": (8, (3, 7), 1, 0, 1, 900.0)}
