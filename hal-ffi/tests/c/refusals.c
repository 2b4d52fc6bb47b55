/*
 * refusals.c: what libhal_ipc answers to what it must refuse, each with its
 * status and a message: NULL arguments, forged pointers, double release,
 * use after release, malformed and wrong-kind handle texts, bad options,
 * and, in a second process, an import by a pid the export does not name,
 * a write to memory exported read-only, an import asked read-only, a
 * handle of a backend that process cannot use, and an export to the
 * processes of this user (taken where the backend's broker checks the
 * importer's uid, HAL_ERR_UNSUPPORTED elsewhere); in a forked child, the
 * parent's objects answer HAL_ERR_FORKED and a device the child opens
 * works.
 *
 *   refusals BACKEND                 the checks; starts itself as the importer
 *   refusals --importer CHECK TEXT   the second process's side of CHECK
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, failures;

/* Expect `got` to be `want`, with a message naming `function` (up to its
 * first parenthesis: `EXPECT` passes the whole call). */
static void expect(const char *what, hal_status got, hal_status want, const char *call) {
    char function[64];
    snprintf(function, sizeof function, "%.*s: ", (int)strcspn(call, "("), call);
    checks++;
    const char *message = hal_last_error();
    if (got != want) {
        failures++;
        fprintf(stderr, "FAIL %s: status %d, expected %d (%s)\n", what, (int)got, (int)want,
                message);
        return;
    }
    if (want != HAL_OK && (message == NULL || strncmp(message, function, strlen(function)) != 0)) {
        failures++;
        fprintf(stderr, "FAIL %s: the message does not name %s: %s\n", what, function,
                message ? message : "(null)");
        return;
    }
    printf("ok %s: %s\n", what, want == HAL_OK ? "HAL_OK" : message);
}

#define EXPECT(call, want) expect(#call, (call), (want), #call)

static int finish(void) {
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}

/* The importer: `check` names what it must see. */
static int importer(const char *check, const char *text) {
    hal_memory *mem = NULL;
    if (strcmp(check, "wrong-pid") == 0) {
        expect("import by a pid the export does not name", hal_import(text, NULL, &mem),
               HAL_ERR_PERMISSION_DENIED, "hal_import");
    } else if (strcmp(check, "read-only-export") == 0) {
        expect("import of a read-only export", hal_import(text, NULL, &mem), HAL_OK, "");
        char byte = 1;
        checks++;
        hal_status status = hal_write(mem, 0, &byte, 1);
        if (status == HAL_OK || strstr(hal_last_error(), "hal_write") == NULL) {
            failures++;
            fprintf(stderr, "FAIL a write to a read-only export: status %d\n", (int)status);
        } else {
            printf("ok a write to a read-only export: status %d: %s\n", (int)status,
                   hal_last_error());
        }
        expect("the read-only import still reads", hal_read(mem, 0, &byte, 1), HAL_OK, "");
        expect("release", hal_memory_release(mem), HAL_OK, "");
    } else if (strcmp(check, "read-only-import") == 0) {
        hal_import_options ro = {sizeof ro, true};
        char byte = 1;
        expect("import asked read-only", hal_import(text, &ro, &mem), HAL_OK, "");
        expect("a write to an import asked read-only", hal_write(mem, 0, &byte, 1),
               HAL_ERR_PERMISSION_DENIED, "hal_write");
        expect("release", hal_memory_release(mem), HAL_OK, "");
    } else if (strcmp(check, "same-user") == 0) {
        char byte = 0;
        expect("import of an export to this user's processes", hal_import(text, NULL, &mem),
               HAL_OK, "");
        expect("it reads", hal_read(mem, 0, &byte, 1), HAL_OK, "");
        expect("release", hal_memory_release(mem), HAL_OK, "");
    } else if (strcmp(check, "unusable-backend") == 0) {
        expect("import of a handle whose backend this process cannot use",
               hal_import(text, NULL, &mem), HAL_ERR_UNAVAILABLE, "hal_import");
    } else {
        fprintf(stderr, "unknown check %s\n", check);
        return 2;
    }
    return finish();
}

/* Run this program as the importer of `text` for `check`; its exit status. */
static int run_importer(const char *check, const char *text, const char *env) {
    pid_t child = fork();
    if (child == 0) {
        if (env != NULL)
            putenv((char *)env);
        execl("/proc/self/exe", "refusals", "--importer", check, text, (char *)NULL);
        _exit(127);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* In a forked child (no exec): the parent's device and memory answer
 * HAL_ERR_FORKED; a device the child opens works where the backend's
 * runtime is not the parent's (`fresh`). The child's exit status counts
 * its failures. */
static void forked_child(const char *backend, hal_device *dev, hal_memory *mem, hal_location where,
                         bool fresh) {
    fflush(stdout);
    fflush(stderr);
    checks++;
    pid_t child = fork();
    if (child == 0) {
        int before = failures;
        char byte;
        hal_memory *out = NULL;
        hal_device *mine = NULL;
        EXPECT(hal_read(mem, 0, &byte, 1), HAL_ERR_FORKED);
        EXPECT(hal_alloc(dev, 4096, where, &out), HAL_ERR_FORKED);
        if (fresh) {
            EXPECT(hal_device_open(backend, 0, &mine), HAL_OK);
            EXPECT(hal_alloc(mine, 65536, where, &out), HAL_OK);
            EXPECT(hal_write(out, 0, "c", 1), HAL_OK);
            EXPECT(hal_memory_release(out), HAL_OK);
            EXPECT(hal_device_release(mine), HAL_OK);
        }
        fflush(stdout);
        _exit(failures - before);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        failures++;
        fprintf(stderr, "FAIL the forked child's checks\n");
    }
}

static void in_child(const char *check, const char *text, const char *env) {
    fflush(stdout);
    checks++;
    int status = run_importer(check, text, env);
    if (status != 0) {
        failures++;
        fprintf(stderr, "FAIL the importer of %s exited %d\n", check, status);
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--importer") == 0)
        return importer(argv[2], argv[3]);
    const char *backend = argc > 1 ? argv[1] : "cpu-shm";
    hal_device *dev = NULL;
    hal_memory *mem = NULL, *gone = NULL, *out = NULL;
    hal_notify *notify = NULL;
    char *text = NULL, *notify_text = NULL;
    bool host_visible = false, pid_list = false, read_only_export = false;

    if (hal_device_open(backend, 0, &dev) != HAL_OK) {
        fprintf(stderr, "cannot open %s: %s\n", backend, hal_last_error());
        return 1;
    }
    hal_device_has(dev, "memory-is-host", &host_visible);
    hal_device_has(dev, "pid-allow-list", &pid_list);
    hal_device_has(dev, "read-only-export", &read_only_export);
    hal_location where = host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE;
    if (hal_alloc(dev, 65536, where, &mem) != HAL_OK ||
        hal_notify_create(dev, &notify) != HAL_OK ||
        hal_notify_export(notify, NULL, &notify_text) != HAL_OK) {
        fprintf(stderr, "setting up on %s: %s\n", backend, hal_last_error());
        return 1;
    }

    /* NULL arguments. */
    EXPECT(hal_device_open(backend, 0, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_alloc(NULL, 4096, where, &out), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_import(NULL, NULL, &out), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_export(mem, NULL, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_read(mem, 0, NULL, 16), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_write(mem, 0, NULL, 16), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_memory_size(mem, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_notify_signal(NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_export_tensor(mem, NULL, NULL, &text), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_memory_release(NULL), HAL_ERR_NULL_ARGUMENT);

    /* Forged pointers and objects of another type: never dereferenced. */
    void *heap = malloc(64);
    memset(heap, 0x5a, 64);
    EXPECT(hal_memory_release((hal_memory *)heap), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_memory_release((hal_memory *)(uintptr_t)0x1234567), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_memory_size((hal_memory *)(void *)notify, (uint64_t *)heap), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_notify_signal((hal_notify *)(void *)dev), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_device_release((hal_device *)(void *)mem), HAL_ERR_INVALID_OBJECT);
    free(heap);
    hal_string_free((char *)(uintptr_t)0x1234567); /* ignored, and said so */
    expect("hal_string_free of a forged pointer", HAL_ERR_INVALID_OBJECT, HAL_ERR_INVALID_OBJECT,
           "hal_string_free");

    /* Double release, use after release. */
    EXPECT(hal_alloc(dev, 4096, where, &gone), HAL_OK);
    EXPECT(hal_memory_release(gone), HAL_OK);
    EXPECT(hal_memory_release(gone), HAL_ERR_DOUBLE_RELEASE);
    uint64_t size = 0;
    EXPECT(hal_memory_size(gone, &size), HAL_ERR_DOUBLE_RELEASE);

    /* Forged pointers with a hal_memory's type bits (a pointer is a token,
     * id << 5 | type) and an id never handed out: the next one (`gone` was
     * the last object made), one far beyond, and 0. Invalid objects, not
     * released ones. */
    uintptr_t memory_bits = (uintptr_t)(void *)mem & 0x1f;
    uintptr_t next_id = ((uintptr_t)(void *)gone >> 5) + 1;
    EXPECT(hal_memory_size((hal_memory *)((next_id << 5) | memory_bits), &size),
           HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_memory_release((hal_memory *)((next_id << 5) | memory_bits)),
           HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_memory_release((hal_memory *)(((next_id + 4096) << 5) | memory_bits)),
           HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_memory_release((hal_memory *)memory_bits), HAL_ERR_INVALID_OBJECT);

    /* Arguments out of range. */
    char buf[16];
    EXPECT(hal_read(mem, 65536 - 8, buf, 16), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_alloc(dev, 4096, 77, &out), HAL_ERR_INVALID_ARGUMENT);
    hal_export_options unsized = {0, HAL_IMPORTERS_ANYONE, NULL, 0, false};
    EXPECT(hal_export(mem, &unsized, &text), HAL_ERR_INVALID_ARGUMENT);
    hal_export_options bad_kind = {sizeof bad_kind, 9, NULL, 0, false};
    EXPECT(hal_export(mem, &bad_kind, &text), HAL_ERR_INVALID_ARGUMENT);
    int64_t shape[1] = {1 << 20};
    DLTensor too_big = {0};
    too_big.ndim = 1;
    too_big.shape = shape;
    too_big.dtype.code = kDLFloat;
    too_big.dtype.bits = 32;
    too_big.dtype.lanes = 1;
    EXPECT(hal_export_tensor(mem, &too_big, NULL, &text), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_device_open("no-such-backend", 0, &dev), HAL_ERR_NOT_FOUND);
    bool has;
    EXPECT(hal_device_has(dev, "no-such-capability", &has), HAL_ERR_NOT_FOUND);

    /* Handle texts: malformed, of another kind. */
    EXPECT(hal_import("not a handle", NULL, &out), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_import("hal1.AAAAAAAAAAAAAAAAAAAAAAAA", NULL, &out), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_import(notify_text, NULL, &out), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_export(mem, NULL, &text), HAL_OK);
    EXPECT(hal_notify_import(text, NULL, &notify), HAL_ERR_INVALID_HANDLE);
    DLManagedTensorVersioned *tensor;
    EXPECT(hal_import_tensor(text, NULL, &tensor), HAL_ERR_INVALID_HANDLE);
    hal_string_free(text);

    /* Named regions (CPU shared memory): create, open, taken, gone. */
    if (strcmp(backend, "cpu-shm") == 0) {
        char name[64];
        hal_memory *named, *opened;
        uint64_t named_size = 0;
        char word[6] = {0};
        snprintf(name, sizeof name, "hal-ffi-refusals-%d", (int)getpid());
        EXPECT(hal_named_create(name, 8192, &named), HAL_OK);
        EXPECT(hal_write(named, 0, "named", 6), HAL_OK);
        EXPECT(hal_named_open(name, &opened), HAL_OK);
        EXPECT(hal_memory_size(opened, &named_size), HAL_OK);
        EXPECT(hal_read(opened, 0, word, 6), HAL_OK);
        checks++;
        if (named_size != 8192 || strcmp(word, "named") != 0) {
            failures++;
            fprintf(stderr, "FAIL the named region opened is not the one created\n");
        }
        EXPECT(hal_named_create(name, 8192, &out), HAL_ERR_ALREADY_EXISTS);
        EXPECT(hal_memory_release(opened), HAL_OK);
        EXPECT(hal_memory_release(named), HAL_OK);
        EXPECT(hal_named_open(name, &out), HAL_ERR_NOT_FOUND);
        EXPECT(hal_named_open(NULL, &out), HAL_ERR_NULL_ARGUMENT);
    }

    /* Events, where the backend shares them: recorded here, waited on
     * through an import; queried where the backend can. */
    bool ipc_event = false, event_query = false;
    hal_device_has(dev, "ipc-event", &ipc_event);
    hal_device_has(dev, "ipc-event-query", &event_query);
    if (ipc_event) {
        hal_event *event, *event_in;
        char *event_text;
        bool done = false;
        EXPECT(hal_event_create(dev, &event), HAL_OK);
        EXPECT(hal_event_export(event, NULL, &event_text), HAL_OK);
        EXPECT(hal_event_import(event_text, NULL, &event_in), HAL_OK);
        EXPECT(hal_event_record(event), HAL_OK);
        EXPECT(hal_event_wait(event_in, 10000000000LL), HAL_OK);
        EXPECT(hal_event_query(event_in, &done),
               event_query ? HAL_OK : HAL_ERR_UNSUPPORTED);
        EXPECT(hal_event_query(event_in, NULL), HAL_ERR_NULL_ARGUMENT);
        EXPECT(hal_event_import(notify_text, NULL, &event), HAL_ERR_INVALID_HANDLE);
        EXPECT(hal_event_release(event_in), HAL_OK);
        EXPECT(hal_event_release(event), HAL_OK);
        EXPECT(hal_event_release(event), HAL_ERR_DOUBLE_RELEASE);
        hal_string_free(event_text);
    }

    /* A wait that times out. */
    EXPECT(hal_notify_wait(notify, 0), HAL_ERR_TIMEOUT);

    /* In a second process. */
    uint32_t self = (uint32_t)getpid();
    if (pid_list) {
        hal_export_options only_me = {sizeof only_me, HAL_IMPORTERS_PIDS, &self, 1, false};
        EXPECT(hal_export(mem, &only_me, &text), HAL_OK);
        in_child("wrong-pid", text, NULL);
        hal_string_free(text);
    }
    if (read_only_export) {
        /* Memory exported writable once cannot be exported read-only. */
        hal_memory *ro_mem;
        hal_export_options ro = {sizeof ro, HAL_IMPORTERS_ANYONE, NULL, 0, true};
        EXPECT(hal_alloc(dev, 65536, where, &ro_mem), HAL_OK);
        EXPECT(hal_export(ro_mem, &ro, &text), HAL_OK);
        in_child("read-only-export", text, NULL);
        hal_string_free(text);
        EXPECT(hal_memory_release(ro_mem), HAL_OK);
        EXPECT(hal_export(mem, &ro, &text), HAL_ERR_PERMISSION_DENIED);
    }
    /* Any process of this user: the broker of cpu-shm checks the uid; the
     * simulator's vendors and CUDA's IPC handles cannot. */
    hal_export_options same_user = {sizeof same_user, HAL_IMPORTERS_SAME_USER, NULL, 0, false};
    if (strcmp(backend, "cpu-shm") == 0) {
        EXPECT(hal_export(mem, &same_user, &text), HAL_OK);
        in_child("same-user", text, NULL);
        hal_string_free(text);
    } else if (strcmp(backend, "cuda-uvm") != 0) {
        EXPECT(hal_export(mem, &same_user, &text), HAL_ERR_UNSUPPORTED);
    }

    /* After fork(): the parent's objects are refused; a device of the
     * child's own works where the runtime is not one the parent loaded. */
    forked_child(backend, dev, mem, where, strcmp(backend, "cuda") != 0);

    hal_export_options anyone = {sizeof anyone, HAL_IMPORTERS_ANYONE, NULL, 0, false};
    EXPECT(hal_export(mem, &anyone, &text), HAL_OK);
    in_child("read-only-import", text, NULL);
    if (strcmp(backend, "cuda") == 0)
        in_child("unusable-backend", text, "HAL_CUDA_LIBRARY=/nonexistent/libcuda.so.1");
    hal_string_free(text);

    EXPECT(hal_notify_release(notify), HAL_OK);
    EXPECT(hal_memory_release(mem), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_ERR_DOUBLE_RELEASE);
    hal_string_free(notify_text);
    return finish();
}
