"""The orchestrator-free runtime: carries out what the lifecycle rules in kprio_core.lifecycle decide."""
