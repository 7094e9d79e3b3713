"""The ``.pte`` file format, without executorch or torch: the bottom room of
`memsched.executorch` (it imports no other room; the package's `errors` only).

* `pte`: ExecuTorch's flatbuffer schema (``program.fbs``, ``ET12``, executorch 1.5.1) as plain
  dataclasses, read and written (`read_pte`, `write_pte`), and the container around it;
* `verify`: the checks ExecuTorch's runtime makes when it loads a program and its methods;
* `read`: a file (a path or bytes) read and verified (`read_program`), its planned sizes and
  per-method summary.
"""
