"""The stages a kernel call goes through, one module each, run in this order:

``declare`` (``Kernel.precompile``'s declarations) · ``bind`` (call arguments -> ``Problem`` and
``Target``) · ``key`` (the plan dictionary's key and guard) · selection (``kernelkit._select``) ·
``codegen`` and ``render`` (body -> ``CompileRequest``) · compile through the caches
(``kernelkit._cache``) · ``load`` (artifact -> loaded program, launch geometry) · ``launch`` (the
generated hot path: pack, launch) · ``repeat`` (a call that repeats one the hot path served,
launched from C where the backend and the arrays allow). ``plan`` composes them once per
specialization; ``pack``, ``structs``, ``overlap`` and ``launch_checks`` (the errors a call can
raise) serve the launch.
"""
