//! [`DeviceState`]: what one device's mutex guards, the pool's bookkeeping and the table of
//! live allocations (`leak::LiveTable`), so that tracking an allocation takes no second lock.
//! It dereferences to the [`DeviceAllocator`]: every pool call reads as it did before.

use crate::leak::LiveTable;
use crate::pool::DeviceAllocator;
use std::ops::{Deref, DerefMut};

/// One device's pool and live table, behind the device's mutex.
pub(super) struct DeviceState<E> {
    pub(super) pool: DeviceAllocator<E>,
    pub(super) live: LiveTable,
}

impl<E> DeviceState<E> {
    pub(super) fn new(pool: DeviceAllocator<E>) -> Self {
        DeviceState {
            pool,
            live: LiveTable::default(),
        }
    }
}

impl<E> Deref for DeviceState<E> {
    type Target = DeviceAllocator<E>;

    fn deref(&self) -> &DeviceAllocator<E> {
        &self.pool
    }
}

impl<E> DerefMut for DeviceState<E> {
    fn deref_mut(&mut self) -> &mut DeviceAllocator<E> {
        &mut self.pool
    }
}
