"""The allow-list pickle machine: pickle is data, never code.

`machine` interprets every opcode of protocols 0-5 from `pickletools.opcodes`; `args` reads the
opcode arguments with bounds; `values` holds the inert values a pickle can build (markers for
globals, stand-ins for allow-listed ones) and the limits. Which globals are allowed is the
caller's business (formats/pytorch/allowlist.py for torch checkpoints). Not named `pickle`, so that
nothing here can shadow the standard library's module.
"""
