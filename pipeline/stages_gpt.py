"""Stage wiring for the generation task (run.task = "generation"): same stage names, decoder models."""
