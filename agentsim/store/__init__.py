"""Run storage shared by the writer (``agentsim.run``) and the reader (``agentsim.inspect``):
the shard format (``shard``) and the run folder's layout of shards (``layout``)."""
