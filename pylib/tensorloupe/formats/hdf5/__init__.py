"""HDF5 as h5py writes it (Keras `.weights.h5`, `.h5`, `.hdf5`), read in pure Python.

Spec: the HDF5 File Format Specification, version 3.0 (section numbers below are its).
    file.py      the superblock (II.A) and bounded reads of the file's addresses
    headers.py   object headers v1 and v2 with their continuation blocks (IV.A.1)
    messages.py  the header messages a dataset or group needs (IV.A.2): dataspace, datatype,
                 layout, filter pipeline, fill value, attribute, link, link info, symbol table
    groups.py    the group graph: symbol tables (v1 B-tree + local heap, III.A.1, III.C) and
                 link messages, walked with a depth, a count and a cycle check
    links.py     soft links resolved among the objects found; external links listed, not followed
    dense.py     links and attributes in dense storage: a fractal heap (III.G), huge objects
    btree2.py    version 2 B-trees (III.A.2): dense name indexes, huge objects, chunk indexes
    earray.py    the extensible array chunk index (VII.B: one unlimited dimension)
    attributes.py  attribute values (numbers, fixed and variable-length strings: global heap)
    chunks.py    chunked datasets: the chunk index (v1 B-tree, single chunk, implicit, fixed
                 array, extensible array, v2 B-tree), the deflate, shuffle and fletcher32
                 filters, and ChunkedSource
    reader.py    FORMAT, sniff, read: datasets become Tensor descriptors, attributes metadata
    keras.py     Keras 3 `.keras`: a ZIP of config.json, metadata.json and model.weights.h5
Nothing of the file is read at open but its headers, groups and attribute values; the chunk
index of a chunked dataset is read when its values are first needed.
"""
