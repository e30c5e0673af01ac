"""The schedules a run can step its agents by, behind one interface the engine offers."""
