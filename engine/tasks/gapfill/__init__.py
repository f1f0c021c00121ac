"""Gap-filling of a six-band solar image series, as an engine task.

Modules, one idea each, torch-free unless noted:
``spec`` (config section, presets, capabilities) · ``physics`` (bands, asinh coding, display
mapping, solar rotation: the one geometry the generator renders with and the aligner inverts) ·
``shards`` (the safetensors shard format and the manifest, with every check on bad input) ·
``synth`` (the synthetic data generator behind ``sensorlm-tui data gapfill``) · ``samples``
(target + nearest usable neighbours, deterministic damage) · ``align`` (torch: fp32 alignment) ·
``model`` (torch: the conditioned U-Net that starts as the blend) · ``losses`` (torch: the
training loss and the reported per-band display PSNR) · ``baselines`` (torch: nearest frame,
linear interpolation, blend) · ``task`` (torch: the Task the Trainer drives).

The package itself imports nothing, so reading ``spec`` costs no torch import.
"""
