//! shm
