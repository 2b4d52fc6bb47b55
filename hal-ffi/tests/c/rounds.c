/*
 * rounds.c: ROUNDS rounds of open, allocate, export, import, read, release
 * in one process, run under valgrind by the leak check: nothing a round
 * makes may outlive its release.
 *
 *   rounds BACKEND ROUNDS
 */
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(int round, const char *what, hal_status status) {
    fprintf(stderr, "rounds: round %d: %s: status %d: %s\n", round, what, (int)status,
            hal_last_error());
    return 1;
}

#define CHECK(call)                                   \
    do {                                              \
        hal_status status_ = (call);                  \
        if (status_ != HAL_OK)                        \
            return failed(round, #call, status_);     \
    } while (0)

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "cpu-shm";
    int rounds = argc > 2 ? atoi(argv[2]) : 1000;
    int round = -1;
    char *list;
    CHECK(hal_backends(&list));
    hal_string_free(list);
    for (round = 0; round < rounds; round++) {
        hal_device *dev;
        hal_memory *mem, *imported;
        hal_notify *notify, *notify_in;
        char *text, *notify_text, *tensor_text;
        bool host_visible;
        CHECK(hal_device_open(backend, 0, &dev));
        CHECK(hal_device_has(dev, "memory-is-host", &host_visible));
        CHECK(hal_alloc(dev, 4096, host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE, &mem));
        CHECK(hal_write(mem, 0, &round, sizeof round));
        CHECK(hal_export(mem, NULL, &text));
        CHECK(hal_import(text, NULL, &imported));
        int seen = -1;
        CHECK(hal_read(imported, 0, &seen, sizeof seen));
        if (seen != round) {
            fprintf(stderr, "rounds: round %d read %d\n", round, seen);
            return 1;
        }
        int64_t shape[1] = {1024};
        DLTensor layout = {0};
        layout.ndim = 1;
        layout.shape = shape;
        layout.dtype.code = kDLInt;
        layout.dtype.bits = 32;
        layout.dtype.lanes = 1;
        DLManagedTensorVersioned *tensor, *local;
        CHECK(hal_export_tensor(mem, &layout, NULL, &tensor_text));
        CHECK(hal_import_tensor(tensor_text, NULL, &tensor));
        tensor->deleter(tensor);
        CHECK(hal_to_dlpack(mem, NULL, &local));
        CHECK(hal_notify_create(dev, &notify));
        CHECK(hal_notify_export(notify, NULL, &notify_text));
        CHECK(hal_notify_import(notify_text, NULL, &notify_in));
        CHECK(hal_notify_signal(notify_in));
        CHECK(hal_notify_wait(notify, 10000000000LL));
        hal_event *event, *event_in;
        char *event_text;
        CHECK(hal_event_create(dev, &event));
        CHECK(hal_event_export(event, NULL, &event_text));
        CHECK(hal_event_import(event_text, NULL, &event_in));
        CHECK(hal_event_record(event));
        CHECK(hal_event_wait(event_in, 10000000000LL));
        CHECK(hal_event_release(event_in));
        CHECK(hal_event_release(event));
        hal_string_free(event_text);
        CHECK(hal_notify_release(notify_in));
        CHECK(hal_notify_release(notify));
        CHECK(hal_memory_release(imported));
        CHECK(hal_memory_release(mem));
        local->deleter(local); /* the tensor held the memory until now */
        CHECK(hal_device_release(dev));
        hal_string_free(text);
        hal_string_free(notify_text);
        hal_string_free(tensor_text);
    }
    printf("rounds: %d rounds on %s\n", rounds, backend);
    return 0;
}
