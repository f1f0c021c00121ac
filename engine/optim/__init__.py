"""The optimizer, precision, learning-rate schedule and the device a run trains on."""
