"""Pure codecs of RocketMQ's formats: bytes in, values out; no files, clocks or logging."""
