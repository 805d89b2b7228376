"""The torch.distributed runtime that executes pipeplan's plans.

It imports `pipeplan`; `pipeplan` never imports it. For now it holds the link benchmark
that `pipeplan profile --nproc N` runs with the executor's process launch and backend.
"""
