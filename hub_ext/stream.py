"""``api/v1/events``: server-sent events with the caller's work — state, position, ETA, reason.

A snapshot is sent when the connection opens and whenever it changes; a
comment line every ``keepalive`` seconds keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import asyncio
import json

from tornado.iostream import StreamClosedError

from .base import BaseHandler


class EventsHandler(BaseHandler):
    keepalive = 15.0

    async def get(self):
        caller = self.caller
        self.require(caller.sees_anything, "watch workloads")
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        svc = self.service
        last = None
        self._closed = False
        try:
            while not self._closed and not svc.stopping:
                changed = svc.next_change()
                snap = await svc.snapshot_for(caller)
                if snap != last:
                    self.write(f"event: workloads\ndata: {json.dumps(snap)}\n\n")
                    last = snap
                else:
                    self.write(": keepalive\n\n")
                await self.flush()
                try:
                    await asyncio.wait_for(asyncio.shield(changed), self.keepalive)
                except asyncio.TimeoutError:
                    pass
        except StreamClosedError:
            return
        if not self._closed:
            self.finish()

    def on_connection_close(self):
        self._closed = True
