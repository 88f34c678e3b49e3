"""The simulated NVML C functions, one module per area of the API.

Each class maps C function names (exactly those pynvml resolves) to implementations that write through the ctypes
objects pynvml passes and return an NVML status code. Device calls get the scenario time and the decoded device
first; the library (`simulation.nvml.library`) does the checks common to every call before them.
"""
