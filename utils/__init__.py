"""The ground floor, importing nothing of the toolkit above it: the workload model, the model, training
and parallel configuration with the presets, rank groups, units and bandwidth, errors, I/O, figures and
CLI flags."""
