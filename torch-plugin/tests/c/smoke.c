/*
 * smoke.c: libblockpool_torch as a C program uses it, against blockpool_torch.h alone.
 *
 * Records history, allocates and frees from 4 threads (each on its own stream), runs out of
 * memory, frees a pointer twice and NULL once, pops an empty annotation stack, leaves one
 * allocation alive in a leak scope, prints the statistics JSON, reads it truncated, and dumps
 * a snapshot to the path given as the only argument. Every line it prints is deterministic on
 * a 1 GiB device, so tests/c_program.rs compares them exactly.
 *
 * Exit status: 0 when every call did what it should, 1 when one did not (the line says
 * which), 2 on bad usage, 3 when the allocator could not start (the reason is printed).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockpool_torch.h"

#define THREADS 4
#define ROUNDS 50
#define MIB ((ssize_t)1 << 20)

static const ssize_t sizes[] = {512, 4096, 100000, MIB};
#define SIZES (sizeof sizes / sizeof sizes[0])

/* Fails the program with what went wrong and blockpool's own reason. */
static void fail(const char *what) {
    char reason[512];
    blockpool_last_error(reason, sizeof reason);
    printf("FAILED: %s: %s\n", what, reason);
    exit(1);
}

/* A text output, snprintf style: ask for the length, then fetch it. Freed by the caller. */
typedef ssize_t (*text_fn)(void *arg, char *buf, size_t buf_len);

static char *read_text(text_fn f, void *arg, const char *what) {
    ssize_t length = f(arg, NULL, 0);
    if (length < 0) fail(what);
    char *buf = malloc((size_t)length + 1);
    if (buf == NULL) fail("host malloc");
    if (f(arg, buf, (size_t)length + 1) != length) fail(what);
    return buf;
}

static ssize_t stats_of(void *device, char *buf, size_t buf_len) {
    return blockpool_memory_stats_json(*(int *)device, buf, buf_len);
}

static ssize_t oom_message(void *unused, char *buf, size_t buf_len) {
    (void)unused;
    return blockpool_last_oom_message(buf, buf_len);
}

static ssize_t scope_report(void *id, char *buf, size_t buf_len) {
    return blockpool_leak_scope_finish(*(uint64_t *)id, buf, buf_len);
}

static void *worker(void *arg) {
    void *stream = (void *)(uintptr_t)((uintptr_t)arg + 1);
    for (int round = 0; round < ROUNDS; round++) {
        void *ptrs[SIZES];
        for (size_t i = 0; i < SIZES; i++) {
            ptrs[i] = blockpool_malloc(sizes[i], 0, stream);
            if (ptrs[i] == NULL) return (void *)1;
        }
        for (size_t i = SIZES; i-- > 0;) blockpool_free(ptrs[i], sizes[i], 0, stream);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: smoke SNAPSHOT_PATH\n");
        return 2;
    }
    int devices = blockpool_device_count();
    if (devices < 0) {
        char reason[1024];
        blockpool_last_error(reason, sizeof reason);
        printf("no allocator (%d): %s\n", devices, reason);
        /* PyTorch's first call is a malloc: it must get NULL, never a pointer to write to. */
        void *ptr = blockpool_malloc(4096, 0, NULL);
        blockpool_last_error(reason, sizeof reason);
        printf("malloc: %s: %s\n", ptr == NULL ? "NULL" : "not NULL", reason);
        return 3;
    }
    printf("devices: %d\n", devices);
    if (blockpool_record_memory_history(1, 0, 1) != BLOCKPOOL_OK) fail("record_memory_history");

    pthread_t threads[THREADS];
    for (uintptr_t t = 0; t < THREADS; t++) {
        if (pthread_create(&threads[t], NULL, worker, (void *)t) != 0) fail("pthread_create");
    }
    for (int t = 0; t < THREADS; t++) {
        void *result;
        pthread_join(threads[t], &result);
        if (result != NULL) fail("an allocation in a thread");
    }
    printf("threads: %d x %d rounds of %d allocations, none NULL\n", THREADS, ROUNDS, (int)SIZES);

    void *big = blockpool_malloc(600 * MIB, 0, NULL);
    if (big == NULL) fail("the first 600 MiB");
    void *second = blockpool_malloc(600 * MIB, 0, NULL);
    char *oom = read_text(oom_message, NULL, "last_oom_message");
    printf("second 600 MiB: %s; %s\n", second == NULL ? "NULL" : "not NULL", oom);
    free(oom);
    blockpool_free(big, 600 * MIB, 0, NULL);
    blockpool_free(big, 600 * MIB, 0, NULL); /* a double free: logged, nothing changes */
    blockpool_free(NULL, 0, 0, NULL);        /* ignored */
    printf("double free and NULL free: returned\n");

    int popped = blockpool_annotate_pop();
    char reason[256];
    blockpool_last_error(reason, sizeof reason);
    printf("pop with no tag: %d, %s\n", popped, reason);

    uint64_t scope = blockpool_leak_scope_begin("smoke");
    if (scope == 0) fail("leak_scope_begin");
    if (blockpool_annotate_push("kept") != BLOCKPOOL_OK) fail("annotate_push");
    void *kept = blockpool_malloc(4096, 0, NULL);
    if (blockpool_annotate_pop() != BLOCKPOOL_OK) fail("annotate_pop");
    char *report = read_text(scope_report, &scope, "leak_scope_finish");
    printf("scope: %s\n", report);
    free(report);
    blockpool_free(kept, 4096, 0, NULL);
    if (blockpool_leak_scope_free(scope) != BLOCKPOOL_OK) fail("leak_scope_free");

    int device = 0;
    char *stats = read_text(stats_of, &device, "memory_stats_json");
    printf("stats: %s\n", stats);
    char head[16];
    ssize_t length = blockpool_memory_stats_json(0, head, sizeof head);
    printf("stats into 16 bytes: \"%s\", length %zd, same as whole: %s\n", head, length,
           length == (ssize_t)strlen(stats) ? "yes" : "no");
    free(stats);

    printf("dump_snapshot: %d\n", blockpool_dump_snapshot(argv[1]));
    return 0;
}
