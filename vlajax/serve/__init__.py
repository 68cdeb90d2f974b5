"""Serving a checkpoint: openpi's websocket policy protocol with cross-client dynamic batching.

    python -m vlajax.serve --checkpoint DIR [--port 8000] [--host 127.0.0.1]

Modules, lowest first: `codec` (msgpack-numpy wire format), `spec` (wire keys, shapes, request
checks), `batching` (bucketed jitted sampling, the inference thread on the pipeline's
`DynamicBatcher`), `server` (websockets, health check, draining), `app` (the command),
`client` (a batched client for remote evaluation and the bench). See docs/serving.md.
"""
