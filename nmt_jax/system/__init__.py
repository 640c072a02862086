"""Machinery under everything: user errors, devices, the compiler's caches.

errors (what a user can fix, one line each), parallel (the device mesh, jit
and pmap), compile_cache, allocator, profiling, timing and workdir_files (the
names of a workdir's files, for every wing that reads or writes one).
"""
