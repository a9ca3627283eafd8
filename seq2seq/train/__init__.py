"""Training: set-up, the loop, validation, state, faults, processes under torchrun."""
