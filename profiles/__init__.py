"""Measured profiles that ship with pipeplan (package data: `executor.planning.profiles_dir()`)."""
