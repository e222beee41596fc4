//! The fake driver's streams and events. Work runs at once, so events complete when recorded,
//! unless the event delay keeps them pending until a query count, a synchronize of their
//! event, stream or context, or a stream waits (`cuStreamWaitEvent`) on an event still
//! pending: its events recorded afterwards complete only after that one.

use super::*;

/// `cuStreamCreate` on the current device.
///
/// # Safety
/// `stream` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut *mut c_void, flags: c_uint) -> u32 {
    with_driver(|d| {
        let device = d.current_device()?;
        // CU_STREAM_DEFAULT (0) or CU_STREAM_NON_BLOCKING (1).
        if stream.is_null() || flags > 1 {
            return Err(code::INVALID_VALUE);
        }
        let handle = d.new_handle(STREAM_BASE);
        d.streams.insert(handle, device);
        write(stream, handle as *mut c_void)
    })
}

/// `cuStreamDestroy_v2`.
#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: *mut c_void) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        d.waits.remove(&(stream as usize));
        d.streams
            .remove(&(stream as usize))
            .map(drop)
            .ok_or(code::INVALID_HANDLE)
    })
}

/// `cuStreamGetCtx`: the primary context of the stream's device; for the null, legacy and
/// per-thread streams, the current context.
///
/// # Safety
/// `context` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(stream: *mut c_void, context: *mut *mut c_void) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        write(context, context_handle(device) as *mut c_void)
    })
}

/// `cuStreamSynchronize`: completes the events recorded on the stream.
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(stream: *mut c_void) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        d.complete_events(device, Some(stream as usize));
        Ok(())
    })
}

/// `cuStreamWaitEvent`: both must be live; the event may be another device's, as CUDA allows.
/// Events recorded on the stream afterwards complete only once the event's last record has
/// (a never-recorded event is complete, so waiting on it does nothing).
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(stream: *mut c_void, event: *mut c_void, flags: c_uint) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        d.event_device(event as usize)?;
        // CU_EVENT_WAIT_DEFAULT (0) or CU_EVENT_WAIT_EXTERNAL (1).
        if flags > 1 {
            return Err(code::INVALID_VALUE);
        }
        let record = d.events.get(&(event as usize)).and_then(|e| e.record);
        if let Some(record) = record.filter(|&r| !d.record_done(r)) {
            let mut waits = d.waits.remove(&(stream as usize)).unwrap_or_default();
            waits.retain(|&r| !d.record_done(r));
            waits.push(record);
            d.waits.insert(stream as usize, waits);
        }
        Ok(())
    })
}

/// `cuEventCreate` on the current device.
///
/// # Safety
/// `event` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut *mut c_void, flags: c_uint) -> u32 {
    with_driver(|d| {
        let device = d.current_device()?;
        d.injected("cuEventCreate")?;
        // BLOCKING_SYNC (1), DISABLE_TIMING (2), INTERPROCESS (4, only with DISABLE_TIMING).
        let interprocess_with_timing = flags & 4 != 0 && flags & 2 == 0;
        if event.is_null() || flags & !7 != 0 || interprocess_with_timing {
            return Err(code::INVALID_VALUE);
        }
        let handle = d.new_handle(EVENT_BASE);
        d.events.insert(
            handle,
            Event {
                device,
                stream: None,
                record: None,
            },
        );
        write(event, handle as *mut c_void)
    })
}

/// `cuEventRecord`: the event and the stream must be of one device.
#[no_mangle]
pub extern "C" fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> u32 {
    with_driver(|d| {
        let device = d.stream_device(stream as usize)?;
        d.event_device(event as usize)?;
        d.injected("cuEventRecord")?;
        let record = d.next_record;
        d.next_record += 1;
        let after = d.waits.get(&(stream as usize)).cloned().unwrap_or_default();
        let event = d
            .events
            .get_mut(&(event as usize))
            .ok_or(code::INVALID_HANDLE)?;
        if event.device != device {
            return Err(code::INVALID_HANDLE);
        }
        event.stream = Some(stream as usize);
        event.record = Some(record);
        let pending = d.event_delay;
        if pending > 0 || !after.is_empty() {
            let stream = stream as usize;
            let record_of = Record {
                device,
                stream,
                pending,
                after,
            };
            d.records.insert(record, record_of);
        }
        d.counts.event_records += 1;
        Ok(())
    })
}

/// `cuEventQuery`: not ready for the first `BLOCKPOOL_FAKE_CUDA_EVENT_DELAY` queries after a
/// record, then complete.
#[no_mangle]
pub extern "C" fn cuEventQuery(event: *mut c_void) -> u32 {
    let mut guard = lock();
    let Some(driver) = guard.as_mut() else {
        return code::NOT_INITIALIZED;
    };
    if let Err(code) = driver.event_device(event as usize) {
        driver.counts.errors += 1;
        return code;
    }
    match driver.events.get(&(event as usize)).map(|e| e.record) {
        None => {
            driver.counts.errors += 1;
            code::INVALID_HANDLE
        }
        Some(Some(record)) if !driver.query_record(record) => code::NOT_READY,
        Some(_) => code::SUCCESS,
    }
}

/// `cuEventSynchronize`: completes the event, and what its stream waited for before it.
#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: *mut c_void) -> u32 {
    with_driver(|d| {
        d.event_device(event as usize)?;
        let event = d
            .events
            .get(&(event as usize))
            .ok_or(code::INVALID_HANDLE)?;
        if let Some(record) = event.record {
            d.complete_record(record);
        }
        Ok(())
    })
}

/// `cuEventDestroy_v2`.
#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: *mut c_void) -> u32 {
    with_driver(|d| {
        d.event_device(event as usize)?;
        d.events
            .remove(&(event as usize))
            .map(drop)
            .ok_or(code::INVALID_HANDLE)
    })
}
