//! Every branch of the backend choice with a scripted probe, the exact error messages, the
//! simulated default backend through the allocator, and the process-wide instance.

use std::cell::Cell;

use super::*;
use crate::backend::DeviceIndex;
use crate::backend::StreamId;
use crate::cuda::{DriverCallError, DriverInfo};

/// A probe report saying CUDA is usable (two devices counted), or unusable for `diagnosis`.
fn report(diagnosis: Option<Diagnosis>) -> DeviceReport {
    DeviceReport {
        cuda_feature: true,
        driver: DriverInfo::default(),
        device_count: if diagnosis.is_none() { 2 } else { 0 },
        devices: Vec::new(),
        diagnosis,
    }
}

/// Runs [`choose`] with a scripted probe and opener, counting the calls to each.
fn run_choose(
    request: BackendRequest,
    diagnosis: Option<Diagnosis>,
    open: Result<&'static str, DefaultAllocatorError>,
) -> (
    Result<Choice<&'static str>, DefaultAllocatorError>,
    u32,
    u32,
) {
    let (probes, opens) = (Cell::new(0), Cell::new(0));
    let outcome = choose(
        request,
        || {
            probes.set(probes.get() + 1);
            report(diagnosis)
        },
        || {
            opens.set(opens.get() + 1);
            open
        },
    );
    (outcome, probes.get(), opens.get())
}

#[test]
fn env_value_parses_auto_cuda_sim_and_unset_ignoring_case_and_spaces() {
    let cases = [
        (None, BackendRequest::Auto),
        (Some("auto"), BackendRequest::Auto),
        (Some(" Auto "), BackendRequest::Auto),
        (Some(""), BackendRequest::Auto),
        (Some("  "), BackendRequest::Auto),
        (Some("cuda"), BackendRequest::Cuda),
        (Some("CUDA"), BackendRequest::Cuda),
        (Some(" sim\n"), BackendRequest::Sim),
        (Some("Sim"), BackendRequest::Sim),
    ];
    for (value, expected) in cases {
        assert_eq!(
            BackendRequest::from_env_value(value),
            Ok(expected),
            "{value:?}"
        );
    }
}

#[test]
fn bad_env_value_names_the_variable_and_the_accepted_values() {
    let error = BackendRequest::from_env_value(Some("gpu"));
    assert_eq!(
        error,
        Err(DefaultAllocatorError::InvalidBackend {
            var: "BLOCKPOOL_BACKEND",
            value: "gpu".to_owned()
        })
    );
    assert_eq!(
        error.err().map(|e| e.to_string()).as_deref(),
        Some(
            "invalid BLOCKPOOL_BACKEND `gpu`: accepted values are `auto`, `cuda` and `sim` \
             (`auto`, also when unset: CUDA when a GPU is usable, else the simulated device)"
        )
    );
}

#[test]
fn sim_requested_asks_nothing_of_the_driver() {
    let (outcome, probes, opens) = run_choose(BackendRequest::Sim, None, Ok("gpu"));
    assert_eq!(outcome, Ok(Choice::Sim(SimReason::Requested)));
    assert_eq!((probes, opens), (0, 0), "sim must not probe or open CUDA");
}

#[test]
fn auto_takes_cuda_when_usable() {
    let (outcome, probes, opens) = run_choose(BackendRequest::Auto, None, Ok("gpu"));
    assert_eq!(
        outcome,
        Ok(Choice::Cuda {
            backend: "gpu",
            requested: false
        })
    );
    assert_eq!((probes, opens), (1, 1));
}

#[test]
fn auto_takes_the_simulated_device_when_cuda_is_unusable_and_keeps_why() {
    let (outcome, probes, opens) = run_choose(
        BackendRequest::Auto,
        Some(Diagnosis::DriverLibraryMissing),
        Ok("gpu"),
    );
    assert_eq!(
        outcome,
        Ok(Choice::Sim(SimReason::CudaUnusable(
            Diagnosis::DriverLibraryMissing
        )))
    );
    assert_eq!((probes, opens), (1, 0), "an unusable CUDA is not opened");
}

#[test]
fn cuda_requested_and_usable_is_cuda() {
    let (outcome, _, opens) = run_choose(BackendRequest::Cuda, None, Ok("gpu"));
    assert_eq!(
        outcome,
        Ok(Choice::Cuda {
            backend: "gpu",
            requested: true
        })
    );
    assert_eq!(opens, 1);
}

#[test]
fn cuda_requested_but_unusable_is_an_error_carrying_the_diagnosis() {
    let (outcome, _, opens) = run_choose(
        BackendRequest::Cuda,
        Some(Diagnosis::DriverLibraryMissing),
        Ok("gpu"),
    );
    assert_eq!(opens, 0);
    assert_eq!(
        outcome,
        Err(DefaultAllocatorError::CudaUnavailable {
            var: "BLOCKPOOL_BACKEND",
            diagnosis: Diagnosis::DriverLibraryMissing
        })
    );
    let error = DefaultAllocatorError::CudaUnavailable {
        var: BACKEND_ENV_VAR,
        diagnosis: Diagnosis::NoDevice,
    };
    assert_eq!(
        error.to_string(),
        format!(
            "BLOCKPOOL_BACKEND=cuda, but CUDA is unusable: the NVIDIA driver found no GPU. {}",
            Diagnosis::NoDevice.advice()
        )
    );
}

#[test]
fn usable_cuda_that_fails_to_open_is_an_error_in_both_modes() {
    let busy = BackendError::Driver {
        device: DeviceIndex::new(0),
        code: 46,
        name: "CUDA_ERROR_DEVICE_UNAVAILABLE".to_owned(),
        message: "busy".to_owned(),
    };
    let failed = DefaultAllocatorError::CudaBackend {
        error: busy.clone(),
    };
    for request in [BackendRequest::Auto, BackendRequest::Cuda] {
        let (outcome, _, _) = run_choose(request, None, Err(failed.clone()));
        assert_eq!(outcome, Err(failed.clone()), "{request:?}");
    }
    assert_eq!(
        failed.to_string(),
        "CUDA looks usable, but its devices could not be opened: driver error 46 \
         (CUDA_ERROR_DEVICE_UNAVAILABLE) on device 0: busy (BLOCKPOOL_BACKEND=sim uses the \
         simulated device instead)"
    );
}

#[test]
fn sim_default_backend_is_one_16_gib_device() {
    let backend = default_backend_for(Some("sim"));
    let backend = match backend {
        Ok(backend) => backend,
        Err(error) => panic!("sim needs nothing: {error}"),
    };
    assert!(!backend.is_cuda());
    assert_eq!(
        format!("{backend:?}"),
        "DefaultBackend { kind: \"sim\", devices: 1 }"
    );
    assert_eq!(
        backend.mem_get_info(DeviceIndex::new(0)),
        Ok(crate::backend::MemInfo {
            free_bytes: 16 << 30,
            total_bytes: 16 << 30
        })
    );
}

#[test]
fn unset_backend_on_this_machine_follows_the_driver_check() {
    let diagnosis = crate::cuda::probe_driver().diagnosis;
    let backend = default_backend_for(None);
    match (diagnosis, backend) {
        (Some(_), Ok(backend)) => assert!(!backend.is_cuda(), "CUDA is unusable here"),
        (None, Ok(backend)) => assert!(backend.is_cuda(), "CUDA is usable here"),
        (_, Err(error)) => panic!("the automatic choice failed: {error}"),
    }
}

#[test]
fn cuda_forced_on_this_machine_without_a_driver_names_the_diagnosis() {
    let Some(diagnosis) = crate::cuda::probe_driver().diagnosis else {
        // A usable GPU: the forced choice must open it.
        let backend = default_backend_for(Some("cuda"));
        assert!(backend.is_ok_and(|b| b.is_cuda()), "CUDA is usable here");
        return;
    };
    assert_eq!(
        default_backend_for(Some("cuda")).err(),
        Some(DefaultAllocatorError::CudaUnavailable {
            var: "BLOCKPOOL_BACKEND",
            diagnosis
        })
    );
}

#[test]
fn bad_config_is_reported_before_the_backend_is_looked_at() {
    let lookup = |name: &str| match name {
        "BLOCKPOOL_ALLOC_CONF" => Some("max_split_size_mb:-1".to_owned()),
        "BLOCKPOOL_BACKEND" => Some("gpu".to_owned()),
        _ => None,
    };
    let error = new_default_allocator_with(lookup).err();
    assert!(
        matches!(error, Some(DefaultAllocatorError::Config(_))),
        "config first, got {error:?}"
    );
    let message = error.map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        message,
        "invalid BLOCKPOOL_ALLOC_CONF: `-1` is not a number; `max_split_size_mb` takes a whole \
         number of MiB, at least 20"
    );
}

#[test]
fn bad_backend_value_stops_the_default_allocator() {
    let error =
        new_default_allocator_with(|name| (name == "BLOCKPOOL_BACKEND").then(|| "cpu".to_owned()))
            .err();
    assert_eq!(
        error,
        Some(DefaultAllocatorError::InvalidBackend {
            var: "BLOCKPOOL_BACKEND",
            value: "cpu".to_owned()
        })
    );
}

#[test]
fn default_allocator_on_the_simulated_device_caches_like_any_other() {
    let alloc = match new_default_allocator_with(|name| {
        (name == "BLOCKPOOL_BACKEND").then(|| "sim".to_owned())
    }) {
        Ok(alloc) => alloc,
        Err(error) => panic!("sim needs nothing: {error}"),
    };
    assert_eq!(alloc.config(), &AllocatorConfig::default());
    let stats = || alloc.memory_stats(0).map_err(|e| e.to_string());
    {
        let block = alloc
            .allocate(0, 4096, StreamId::from_raw(3))
            .map_err(|e| e.to_string());
        assert_eq!(block.as_ref().map(|b| b.size()), Ok(4096));
        let event = alloc
            .backend()
            .record_event(DeviceIndex::new(0), StreamId::from_raw(3));
        let event = event.map_err(|e| e.to_string());
        assert!(matches!(event, Ok(DefaultEvent::Sim(_))), "{event:?}");
        if let Ok(event) = event {
            assert_eq!(
                alloc.backend().query_event(&event),
                Ok(false),
                "no work ran yet"
            );
            alloc.backend().release_event(event);
        }
    }
    let after_free = stats().map(|s| {
        (
            s["reserved_bytes.all.current"],
            s["allocated_bytes.all.current"],
        )
    });
    assert_eq!(
        after_free,
        Ok((2 << 20, 0)),
        "one 2 MiB small segment, cached"
    );
    assert_eq!(alloc.empty_cache().map_err(|e| e.to_string()), Ok(()));
    let after_empty = stats().map(|s| s["reserved_bytes.all.current"]);
    assert_eq!(after_empty, Ok(0));
    let host = alloc.backend().alloc_host(4096);
    assert!(host.is_ok(), "{host:?}");
    if let Ok(ptr) = host {
        assert_eq!(alloc.backend().free_host(ptr, 4096), Ok(()));
    }
}

#[test]
fn process_wide_allocator_is_made_once() {
    let first = try_default_allocator().map(|a| a as *const _);
    let second = try_default_allocator().map(|a| a as *const _);
    assert_eq!(first, second, "same allocator (or same error) every time");
}

#[test]
fn driver_call_errors_pass_through_the_diagnosis_unchanged() {
    let error = DriverCallError::new("cuInit", 46, "CUDA_ERROR_DEVICE_UNAVAILABLE");
    let diagnosis = Diagnosis::NoUsableDevice { error };
    let (outcome, _, _) = run_choose(BackendRequest::Cuda, Some(diagnosis.clone()), Ok("gpu"));
    assert_eq!(
        outcome.err().map(|e| e.to_string()),
        Some(format!(
            "BLOCKPOOL_BACKEND=cuda, but CUDA is unusable: no GPU could be used: cuInit failed \
             with CUDA_ERROR_DEVICE_UNAVAILABLE (46). {}",
            diagnosis.advice()
        ))
    );
}

#[test]
fn the_default_allocator_on_the_simulated_device_has_expandable_segments() {
    let alloc = new_default_allocator_with(|name| match name {
        "BLOCKPOOL_BACKEND" => Some("sim".to_owned()),
        "BLOCKPOOL_ALLOC_CONF" => Some("expandable_segments:True".to_owned()),
        _ => None,
    })
    .expect("sim needs nothing");
    assert!(
        alloc.config().expandable_segments(),
        "not turned off by a fallback"
    );
    let a = alloc.allocate(0, 30 << 20, StreamId::DEFAULT).unwrap();
    let b = alloc.allocate(0, 30 << 20, StreamId::DEFAULT).unwrap();
    assert_eq!(b.ptr(), a.ptr() + (30 << 20), "one segment, grown in place");
    // Without the `cuda` feature the simulated device is the only kind.
    #[allow(irrefutable_let_patterns)]
    let DefaultBackend::Sim(sim) = alloc.backend() else {
        panic!("BLOCKPOOL_BACKEND=sim gives the simulated device");
    };
    assert_eq!(
        sim.calls(DeviceIndex::new(0)).segment_allocs,
        0,
        "no fixed segment"
    );
    assert_eq!(
        sim.mapped_bytes(DeviceIndex::new(0)),
        60 << 20,
        "three 20 MiB units mapped"
    );
}
