//! The fake driver's streams and events. Work runs at once, so events complete when recorded,
//! unless the event delay keeps them pending until a query count, a synchronize of their
//! event, stream or context.

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
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(stream: *mut c_void, event: *mut c_void, flags: c_uint) -> u32 {
    with_driver(|d| {
        d.stream_device(stream as usize)?;
        d.event_device(event as usize)?;
        // CU_EVENT_WAIT_DEFAULT (0) or CU_EVENT_WAIT_EXTERNAL (1).
        if flags > 1 {
            return Err(code::INVALID_VALUE);
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
                pending: 0,
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
        let delay = d.event_delay;
        let event = d
            .events
            .get_mut(&(event as usize))
            .ok_or(code::INVALID_HANDLE)?;
        if event.device != device {
            return Err(code::INVALID_HANDLE);
        }
        event.stream = Some(stream as usize);
        event.pending = delay;
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
    match driver.events.get_mut(&(event as usize)) {
        None => {
            driver.counts.errors += 1;
            code::INVALID_HANDLE
        }
        Some(event) if event.pending > 0 => {
            event.pending -= 1;
            code::NOT_READY
        }
        Some(_) => code::SUCCESS,
    }
}

/// `cuEventSynchronize`: completes the event.
#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: *mut c_void) -> u32 {
    with_driver(|d| {
        d.event_device(event as usize)?;
        let event = d
            .events
            .get_mut(&(event as usize))
            .ok_or(code::INVALID_HANDLE)?;
        event.pending = 0;
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
