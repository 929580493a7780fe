// A registrar decides what the pool may lend out as slices: implementing it is `unsafe`.
use memory::{ChunkMemory, PoolAccess, Registrar, Registration};

#[derive(Debug)]
struct Liar;

impl Registrar for Liar {
    fn register(&self, _: &ChunkMemory, _: PoolAccess) -> memory::Result<Box<dyn Registration>> {
        unimplemented!()
    }
}

#[derive(Debug)]
struct NoRights;

impl Registration for NoRights {
    fn lkey(&self) -> u32 {
        0
    }
    fn rkey(&self) -> Option<u32> {
        None
    }
    fn access(&self) -> PoolAccess {
        PoolAccess::LOCAL_WRITE
    }
    fn deregister(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}

fn main() {}
