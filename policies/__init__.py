"""How to choose: the performance model, its calibration, goal presets and the search strategy."""
