"""The stand-in for libnvidia-ml: an object with NVML's C function names that the real pynvml calls into."""
