"""One run, start to end: the world builder, the engine and its schedules, checkpoints,
forks, the run folder and the run's outcome."""
