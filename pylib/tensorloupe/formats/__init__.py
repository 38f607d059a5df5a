"""Container format readers. Each module exposes `sniff(head, size, name)` and `read(source)`."""
