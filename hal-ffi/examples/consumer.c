/*
 * consumer.c: the other side of producer.c (which starts it). Prints its id
 * as the runtime knows it (for the producer's pid lists), reads the
 * producer's id and three handle texts from stdin (a buffer, a tensor, a
 * notify), verifies the buffer and the tensor, writes an answer into the buffer, then plays the
 * notify ping-pong: it prints the handle of a notify of its own, waits on
 * it and signals the producer's.
 *
 *   consumer BACKEND ROUNDS
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_NS 10000000000LL
static const char ANSWER[] = "verified by the consumer";

static int failed(const char *what, hal_status status) {
    fprintf(stderr, "consumer: %s: status %d: %s\n", what, (int)status, hal_last_error());
    return 1;
}

#define CHECK(call)                                   \
    do {                                              \
        hal_status status_ = (call);                  \
        if (status_ != HAL_OK)                        \
            return failed(#call, status_);            \
    } while (0)

static unsigned char pattern(uint64_t i) { return (unsigned char)((i * 31 + 7) % 251); }

static char *read_line(void) {
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, stdin) <= 0) {
        free(line);
        return NULL;
    }
    line[strcspn(line, "\n")] = 0;
    return line;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: consumer BACKEND ROUNDS (started by producer)\n");
        return 2;
    }
    int rounds = atoi(argv[2]);

    /* Our id as the runtime knows it, for the producer's pid lists. */
    hal_device *dev;
    uint32_t me;
    CHECK(hal_device_open(argv[1], 0, &dev));
    CHECK(hal_device_process_id(dev, &me));
    printf("%u\n", me);
    fflush(stdout);

    char *producer_id = read_line();
    char *buffer_text = read_line(), *tensor_text = read_line(), *ping_text = read_line();
    if (producer_id == NULL || buffer_text == NULL || tensor_text == NULL || ping_text == NULL) {
        fprintf(stderr, "consumer: expected the producer's id and three handle texts on stdin\n");
        return 1;
    }

    /* The buffer: the backend and the device come from the handle. */
    hal_memory *buffer;
    uint64_t size;
    CHECK(hal_import(buffer_text, NULL, &buffer));
    CHECK(hal_memory_size(buffer, &size));
    unsigned char *bytes = malloc(size);
    CHECK(hal_read(buffer, 0, bytes, size));
    for (uint64_t i = 0; i < size; i++) {
        if (bytes[i] != pattern(i)) {
            fprintf(stderr, "consumer: byte %llu differs\n", (unsigned long long)i);
            return 1;
        }
    }
    free(bytes);
    CHECK(hal_write(buffer, 0, ANSWER, sizeof ANSWER));
    CHECK(hal_memory_release(buffer));

    /* The tensor: dtype, shape and strides travel with the handle. */
    DLManagedTensorVersioned *tensor;
    CHECK(hal_import_tensor(tensor_text, NULL, &tensor));
    const DLTensor *t = &tensor->dl_tensor;
    if (t->ndim != 2 || t->shape[0] != 16 || t->shape[1] != 64 || t->dtype.code != kDLFloat ||
        t->dtype.bits != 32 || t->strides[0] != 64 || t->strides[1] != 1) {
        fprintf(stderr, "consumer: the tensor's layout is not the producer's\n");
        return 1;
    }
    if (t->device.device_type == kDLCPU) {
        const float *values = (const float *)((const char *)t->data + t->byte_offset);
        for (int i = 0; i < 16 * 64; i++) {
            if (values[i] != (float)i / 2.0f) {
                fprintf(stderr, "consumer: tensor element %d differs\n", i);
                return 1;
            }
        }
    }
    int device_type = (int)t->device.device_type;
    tensor->deleter(tensor);

    /* The ping-pong: wait on our own notify, signal the producer's. */
    hal_notify *ping, *pong;
    bool pid_list;
    char *pong_text;
    CHECK(hal_device_has(dev, "pid-allow-list", &pid_list));
    CHECK(hal_notify_import(ping_text, NULL, &ping));
    CHECK(hal_notify_create(dev, &pong));
    uint32_t producer = (uint32_t)strtoul(producer_id, NULL, 10);
    hal_export_options only = {sizeof only, HAL_IMPORTERS_PIDS, &producer, 1, false};
    CHECK(hal_notify_export(pong, pid_list ? &only : NULL, &pong_text));
    printf("%s\n", pong_text);
    fflush(stdout);
    hal_string_free(pong_text);
    for (int i = 0; i < rounds; i++) {
        CHECK(hal_notify_wait(pong, TIMEOUT_NS));
        CHECK(hal_notify_signal(ping));
    }
    printf("consumer %d: %llu bytes verified, a 16x64 float32 tensor (DLPack device type %d), "
           "%d pings answered\n",
           (int)getpid(), (unsigned long long)size, device_type, rounds);
    CHECK(hal_notify_release(pong));
    CHECK(hal_notify_release(ping));
    CHECK(hal_device_release(dev));
    free(producer_id), free(buffer_text), free(tensor_text), free(ping_text);
    return 0;
}
