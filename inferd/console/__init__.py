"""The web console at /ui: static pages (no build step, no outside origin) and
`GET /api/stats`, the numbers of /metrics as JSON for its dashboard. Served by
`inferd serve` and `inferd router` alike, so it imports no engine and no torch:
each app hands it a stats source (`server_stats`, `router_stats`)."""
