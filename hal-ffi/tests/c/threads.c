/*
 * threads.c: the library used by many threads at once, as the header
 * promises it may be.
 *
 *   threads BACKEND
 *
 * - THREADS threads each run ROUNDS rounds of open, allocate, write,
 *   export, import, read back and release, all at the same time;
 * - the same threads write their own slices of one shared buffer
 *   concurrently, and every slice reads back whole;
 * - each thread's last error is its own: a thread that just failed reads
 *   its own message while the others fail differently;
 * - two threads release the same object at the same moment: exactly one
 *   release succeeds and the other is reported, never a crash.
 *
 * Prints "N checks passed" and exits 0, or names the first failure.
 */
/* pthread barriers are POSIX, not C11. */
#define _POSIX_C_SOURCE 200809L

#include <hal.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define ROUNDS 50
#define SLICE 4096

static const char *backend;
static hal_memory *shared_mem;
static atomic_int checks;
static pthread_barrier_t start;

struct result {
    char message[512];
};

static void *fail(struct result *r, const char *what, hal_status status) {
    snprintf(r->message, sizeof r->message, "%s: status %d: %s", what, (int)status,
             hal_last_error());
    return r;
}

#define CHECK(call)                                  \
    do {                                             \
        hal_status status_ = (call);                 \
        if (status_ != HAL_OK)                       \
            return fail(r, #call, status_);          \
        atomic_fetch_add(&checks, 1);                \
    } while (0)

#define REQUIRE(cond, ...)                                            \
    do {                                                              \
        if (!(cond)) {                                                \
            snprintf(r->message, sizeof r->message, __VA_ARGS__);     \
            return r;                                                 \
        }                                                             \
        atomic_fetch_add(&checks, 1);                                 \
    } while (0)

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    struct result *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_barrier_wait(&start);

    /* Rounds of a thread's own objects, all threads at once. */
    for (int round = 0; round < ROUNDS; round++) {
        hal_device *dev;
        hal_memory *mem, *imported;
        char *text;
        bool host_visible;
        CHECK(hal_device_open(backend, 0, &dev));
        CHECK(hal_device_has(dev, "memory-is-host", &host_visible));
        CHECK(hal_alloc(dev, SLICE, host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE,
                        &mem));
        int stamp = id * 100000 + round;
        CHECK(hal_write(mem, 0, &stamp, sizeof stamp));
        CHECK(hal_export(mem, NULL, &text));
        CHECK(hal_import(text, NULL, &imported));
        hal_string_free(text);
        int seen = -1;
        CHECK(hal_read(imported, 0, &seen, sizeof seen));
        REQUIRE(seen == stamp, "thread %d round %d read %d, wrote %d", id, round, seen, stamp);
        CHECK(hal_memory_release(imported));
        CHECK(hal_memory_release(mem));
        CHECK(hal_device_release(dev));
    }

    /* A slice of the shared buffer of its own, written while the others
     * write theirs. */
    unsigned char mine[SLICE], back[SLICE];
    memset(mine, 0x40 + id, sizeof mine);
    CHECK(hal_write(shared_mem, (uint64_t)id * SLICE, mine, sizeof mine));

    /* This thread's last error is this thread's: each fails in its own way
     * (a handle text naming its id) and reads its own message back while
     * the others fail too. */
    for (int round = 0; round < ROUNDS; round++) {
        char bogus[64];
        snprintf(bogus, sizeof bogus, "hal1.thread-%d-round-%d", id, round);
        hal_memory *none = NULL;
        hal_status status = hal_import(bogus, NULL, &none);
        REQUIRE(status == HAL_ERR_INVALID_HANDLE, "thread %d: a bogus handle gave %d", id,
                (int)status);
        REQUIRE(none == NULL, "thread %d: a failed import wrote an object", id);
        const char *message = hal_last_error();
        REQUIRE(message && strlen(message) > 0, "thread %d: no message after a failure", id);
        REQUIRE(strstr(message, "NULL") == NULL,
                "thread %d: after a bogus handle the last error is another call's: \"%s\"", id,
                message);
        /* A NULL argument fails with a message that differs from the
         * bogus handle's: the message read must be this call's. */
        status = hal_memory_size(NULL, NULL);
        REQUIRE(status == HAL_ERR_NULL_ARGUMENT, "thread %d: NULL gave %d", id, (int)status);
        const char *second = hal_last_error();
        REQUIRE(second && strstr(second, "NULL") != NULL,
                "thread %d: the last error after a NULL argument is \"%s\"", id,
                second ? second : "(null)");
    }

    pthread_barrier_wait(&start);
    CHECK(hal_read(shared_mem, (uint64_t)((id + 1) % THREADS) * SLICE, back, sizeof back));
    for (size_t i = 0; i < sizeof back; i++)
        REQUIRE(back[i] == 0x40 + (id + 1) % THREADS,
                "thread %d: byte %zu of thread %d's slice is 0x%02x", id, i,
                (id + 1) % THREADS, back[i]);
    r->message[0] = '\0';
    return r;
}

struct racer {
    hal_memory *mem;
    pthread_barrier_t *go;
    hal_status status;
};

static void *release_racer(void *arg) {
    struct racer *racer = arg;
    pthread_barrier_wait(racer->go);
    racer->status = hal_memory_release(racer->mem);
    return NULL;
}

int main(int argc, char **argv) {
    backend = argc > 1 ? argv[1] : "cpu-shm";
    hal_device *dev;
    bool host_visible;
    if (hal_device_open(backend, 0, &dev) != HAL_OK) {
        fprintf(stderr, "threads: cannot open %s: %s\n", backend, hal_last_error());
        return 1;
    }
    if (hal_device_has(dev, "memory-is-host", &host_visible) != HAL_OK
        || hal_alloc(dev, (uint64_t)SLICE * THREADS,
                     host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE,
                     &shared_mem) != HAL_OK) {
        fprintf(stderr, "threads: cannot allocate on %s: %s\n", backend, hal_last_error());
        return 1;
    }

    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "threads: pthread_create failed\n");
            return 1;
        }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        struct result *res = NULL;
        pthread_join(threads[i], (void **)&res);
        if (!res) {
            fprintf(stderr, "threads: thread %d ran out of memory\n", i);
            failures++;
        } else {
            if (res->message[0]) {
                fprintf(stderr, "threads: thread %d: %s\n", i, res->message);
                failures++;
            }
            free(res);
        }
    }
    pthread_barrier_destroy(&start);
    if (failures)
        return 1;

    /* Two threads release one object at the same moment, a hundred times:
     * one release succeeds, the other is a double release. */
    for (int round = 0; round < 100; round++) {
        hal_memory *mem;
        if (hal_alloc(dev, SLICE, host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE, &mem)
            != HAL_OK) {
            fprintf(stderr, "threads: allocate: %s\n", hal_last_error());
            return 1;
        }
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        struct racer a = {mem, &go, HAL_ERR_OTHER}, b = {mem, &go, HAL_ERR_OTHER};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, release_racer, &a);
        pthread_create(&tb, NULL, release_racer, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
        int ok = (a.status == HAL_OK) + (b.status == HAL_OK);
        int refused = (a.status == HAL_ERR_DOUBLE_RELEASE) + (b.status == HAL_ERR_DOUBLE_RELEASE);
        if (ok != 1 || refused != 1) {
            fprintf(stderr, "threads: round %d: racing releases answered %d and %d\n", round,
                    (int)a.status, (int)b.status);
            return 1;
        }
        atomic_fetch_add(&checks, 1);
    }

    if (hal_memory_release(shared_mem) != HAL_OK || hal_device_release(dev) != HAL_OK) {
        fprintf(stderr, "threads: release: %s\n", hal_last_error());
        return 1;
    }
    printf("%d checks passed on %s with %d threads\n", atomic_load(&checks), backend, THREADS);
    return 0;
}
