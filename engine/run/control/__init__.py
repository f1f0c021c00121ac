"""Steering a run: the request types, the channel the engine serves on control.sock, the client and
session viewers use, and the launcher that starts an engine process."""
