//! Zip archives (PyTorch checkpoints, `.npz`): the entries and where their
//! stored bytes are. Not read yet (a stub).
