"""NumPy files: the .npy header (header), .npy (npy) and .npz ZIPs of them (npz)."""
