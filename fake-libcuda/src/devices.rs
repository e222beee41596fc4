//! The fake driver's devices (count, name, attributes, memory) and contexts (primary context
//! retain/release, the per-thread context stack, synchronize).

use super::*;

/// `cuDeviceGetCount`.
///
/// # Safety
/// `count` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    with_driver(|d| write(count, d.devices.len() as c_int))
}

/// `cuDeviceGet`: the device handle is its ordinal.
///
/// # Safety
/// `device` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> u32 {
    with_driver(|d| {
        let ordinal = d.device(ordinal)?;
        write(device, ordinal as c_int)
    })
}

/// `cuDeviceGetName`: `blockpool fake GPU <n>`, cut to `len` with its NUL.
///
/// # Safety
/// `name` is null or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> u32 {
    with_driver(|d| {
        let device = d.device(device)?;
        let len = usize::try_from(len).map_err(|_| code::INVALID_VALUE)?;
        if name.is_null() || len == 0 {
            return Err(code::INVALID_VALUE);
        }
        let text = format!("blockpool fake GPU {device}");
        let n = text.len().min(len - 1);
        // SAFETY: the caller gave `len` writable bytes at `name`; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// `cuDeviceGetAttribute`: compute capability 9.0, 132 multiprocessors, memory pools and
/// unified addressing supported, 0 for everything else.
///
/// # Safety
/// `value` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    device: c_int,
) -> u32 {
    with_driver(|d| {
        d.device(device)?;
        let answer = match attribute {
            ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
            ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
            ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
            ATTRIBUTE_MEMORY_POOLS_SUPPORTED | ATTRIBUTE_UNIFIED_ADDRESSING => 1,
            ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => c_int::from(d.vmm_supported),
            _ => 0,
        };
        write(value, answer)
    })
}

/// `cuDeviceTotalMem_v2`.
///
/// # Safety
/// `bytes` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> u32 {
    with_driver(|d| {
        let device = d.device(device)?;
        write(bytes, d.devices[device].capacity)
    })
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// `context` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(context: *mut *mut c_void, device: c_int) -> u32 {
    with_driver(|d| {
        let device = d.device(device)?;
        if d.retain_error != code::SUCCESS {
            return Err(d.retain_error);
        }
        write(context, context_handle(device) as *mut c_void)?;
        d.devices[device].primary_refs += 1;
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> u32 {
    with_driver(|d| {
        let device = d.device(device)?;
        let refs = &mut d.devices[device].primary_refs;
        *refs = refs.checked_sub(1).ok_or(code::INVALID_CONTEXT)?;
        Ok(())
    })
}

/// `cuCtxGetCurrent`: null when the thread has none.
///
/// # Safety
/// `context` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(context: *mut *mut c_void) -> u32 {
    with_driver(|_| {
        let top = CONTEXTS.with(|stack| stack.borrow().last().copied());
        write(context, top.unwrap_or(0) as *mut c_void)
    })
}

/// `cuCtxSetCurrent`: replaces the top of the stack (null pops it).
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(context: *mut c_void) -> u32 {
    with_driver(|d| {
        let handle = context as usize;
        if handle != 0 {
            d.context_device(handle)?;
        }
        CONTEXTS.with(|stack| {
            let mut stack = stack.borrow_mut();
            stack.pop();
            if handle != 0 {
                stack.push(handle);
            }
        });
        Ok(())
    })
}

/// `cuCtxPushCurrent_v2`.
#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(context: *mut c_void) -> u32 {
    with_driver(|d| {
        let handle = context as usize;
        d.context_device(handle)?;
        CONTEXTS.with(|stack| stack.borrow_mut().push(handle));
        Ok(())
    })
}

/// `cuCtxPopCurrent_v2`.
///
/// # Safety
/// `context` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(context: *mut *mut c_void) -> u32 {
    with_driver(|_| {
        let popped = CONTEXTS.with(|stack| stack.borrow_mut().pop());
        let popped = popped.ok_or(code::INVALID_CONTEXT)?;
        if !context.is_null() {
            write(context, popped as *mut c_void)?;
        }
        Ok(())
    })
}

/// `cuCtxGetDevice`.
///
/// # Safety
/// `device` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> u32 {
    with_driver(|d| {
        let current = d.current_device()?;
        write(device, current as c_int)
    })
}

/// `cuCtxSynchronize`: completes every event of the current device.
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> u32 {
    with_driver(|d| {
        let device = d.current_device()?;
        d.complete_events(device, None);
        Ok(())
    })
}
