"""The engine: allocates the kernels' state, drives the simulation loop in chunks, spills the
batch log while the loop runs."""
