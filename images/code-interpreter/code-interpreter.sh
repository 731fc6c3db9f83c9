#!/bin/sh
# Keeps the sandbox alive; sandboxd runs commands through its own agent.
exec sleep infinity
