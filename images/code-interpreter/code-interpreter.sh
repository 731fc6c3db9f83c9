#!/bin/sh
# Entry point of the local stand-in of opensandbox/code-interpreter. Like
# upstream's, it runs a Jupyter notebook server on 127.0.0.1:$JUPYTER_PORT
# with the token $JUPYTER_TOKEN (both set in the image), which sandboxd's
# agent drives for /code. Commands arrive through the agent, not through
# this script. With JUPYTER_HOST set empty (or jupyter missing) it only keeps
# the sandbox alive, and the agent runs /code with its own Python driver.
if [ -z "${JUPYTER_HOST:-}" ] || ! command -v jupyter >/dev/null 2>&1; then
	exec sleep infinity
fi
log=/opt/code-interpreter/jupyter.log
if ! : >>"$log" 2>/dev/null; then
	log=/dev/null
fi
cd /workspace 2>/dev/null || cd /
# The image's MPLBACKEND=Agg suits scripts; kernels draw with the inline
# backend, which sends plt.show() and a cell's open figures as display data.
export MPLBACKEND=module://matplotlib_inline.backend_inline
exec jupyter notebook --ip=127.0.0.1 --port="${JUPYTER_PORT:-44771}" --allow-root --no-browser \
	--NotebookApp.token="${JUPYTER_TOKEN:-}" >>"$log" 2>&1
