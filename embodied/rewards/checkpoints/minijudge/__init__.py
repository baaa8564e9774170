"""The shipped minijudge checkpoint: config.json, model.safetensors, calibration.json."""
