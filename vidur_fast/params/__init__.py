"""Config -> kernel inputs: scheduler parameters, KV capacity (the memory planner), up-front
rejection of requests that can never run. Kernels see only what this stage builds."""
