"""What the serving engine on each GPU pod knows (queue, batch, KV cache, latencies, rates), read on this node.

`endpoint` finds a pod's metrics endpoint from its object (IP, annotations, ports); `fetch` reads it within bounds;
`textparse` keeps only the families an engine mapping (`mappings`) reads; `normalise` turns them into the `/pods`
contract's InferenceFigures, with `window` keeping histogram and counter reads over the window; `reader` runs all of
it every interval on its own thread and publishes `EngineReadings` for the poll loop.
"""

from exporter.engines.reader import EngineReader, EngineReadings

__all__ = ["EngineReader", "EngineReadings"]
