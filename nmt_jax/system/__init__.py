"""Machinery under everything: user errors, devices, the compiler's caches.

errors (what a user can fix, one line each), parallel (the device mesh, jit
and pmap), compile_cache, allocator, profiling and timing.
"""
