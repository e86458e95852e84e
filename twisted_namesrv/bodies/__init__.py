"""RocketMQ's data types as they travel in bodies: routes, cluster info, topic lists, KV
tables, data versions, and the broker registration body."""
