"""Runners for partitioned models, usable without any solver.

`segments`: a threaded pipeline over .tflite segments (one LiteRT interpreter per stage).
`rpc_servers`: a pool of TVM RPC servers (local processes always stopped, or real devices by
``host:port`` / tracker key), one session per device. `rpc_pipeline`: built stages streamed
through those devices with the host relaying tensors (`run_pipeline`), one model on one device
(`run_single`), any library function on a device (`RemoteStage`).
"""
