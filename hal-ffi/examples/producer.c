/*
 * producer.c: share a buffer, a tensor and a notify ping-pong with another
 * process through libhal_ipc. Starts ./consumer (next to this program) as a
 * child, hands it three handle texts down its stdin, and exits 0 only when
 * the consumer verified everything and answered.
 *
 *   cc -std=c11 -Wall -Wextra -o producer producer.c $(pkg-config --cflags --libs hal-ipc)
 *   cc -std=c11 -Wall -Wextra -o consumer consumer.c $(pkg-config --cflags --libs hal-ipc)
 *   ./producer            # the best backend here
 *   ./producer mock-cuda  # or name one: cpu-shm, mock-cuda, mock-ascend, cuda, ...
 */
#define _GNU_SOURCE
#include <hal.h>

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (1u << 20)
#define ROWS 16
#define COLS 64
#define TIMEOUT_NS 10000000000LL
static const char ANSWER[] = "verified by the consumer";

static int failed(const char *what, hal_status status) {
    fprintf(stderr, "producer: %s: status %d: %s\n", what, (int)status, hal_last_error());
    return 1;
}

#define CHECK(call)                                   \
    do {                                              \
        hal_status status_ = (call);                  \
        if (status_ != HAL_OK)                        \
            return failed(#call, status_);            \
    } while (0)

static unsigned char pattern(uint64_t i) { return (unsigned char)((i * 31 + 7) % 251); }

/* The consumer: $HAL_EXAMPLE_CONSUMER, or `consumer` next to this program. */
static void consumer_path(char *out, size_t len) {
    const char *env = getenv("HAL_EXAMPLE_CONSUMER");
    char self[PATH_MAX] = {0};
    if (env != NULL) {
        snprintf(out, len, "%s", env);
        return;
    }
    if (readlink("/proc/self/exe", self, sizeof self - 1) < 0)
        snprintf(self, sizeof self, ".");
    snprintf(out, len, "%s/consumer", dirname(self));
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : NULL;
    int rounds = argc > 2 ? atoi(argv[2]) : 100;
    hal_device *dev;
    char *name;
    CHECK(hal_device_open(backend, 0, &dev));
    CHECK(hal_device_backend(dev, &name));
    printf("producer %d: backend %s\n", (int)getpid(), name);

    /* Host memory where the device has it, device memory otherwise. */
    bool host_visible, pid_list;
    CHECK(hal_device_has(dev, "memory-is-host", &host_visible));
    CHECK(hal_device_has(dev, "pid-allow-list", &pid_list));
    hal_location where = host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE;

    /* The buffer: SIZE bytes of a pattern. */
    hal_memory *buffer;
    CHECK(hal_alloc(dev, SIZE, where, &buffer));
    unsigned char *bytes = malloc(SIZE);
    for (uint64_t i = 0; i < SIZE; i++)
        bytes[i] = pattern(i);
    CHECK(hal_write(buffer, 0, bytes, SIZE));
    free(bytes);

    /* The tensor: ROWS x COLS float32, element i is i / 2. */
    hal_memory *tmem;
    CHECK(hal_alloc(dev, 65536, where, &tmem));
    float values[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        values[i] = (float)i / 2.0f;
    CHECK(hal_write(tmem, 0, values, sizeof values));
    int64_t shape[2] = {ROWS, COLS};
    DLTensor layout = {0};
    layout.ndim = 2;
    layout.shape = shape;
    layout.dtype.code = kDLFloat;
    layout.dtype.bits = 32;
    layout.dtype.lanes = 1;

    /* The notify the consumer signals; we wait on it. */
    hal_notify *ping;
    CHECK(hal_notify_create(dev, &ping));

    /* Start the consumer, its stdin and stdout on pipes. */
    int to_child[2], from_child[2];
    char path[PATH_MAX + 16], rounds_text[16];
    consumer_path(path, sizeof path);
    snprintf(rounds_text, sizeof rounds_text, "%d", rounds);
    if (pipe(to_child) != 0 || pipe(from_child) != 0)
        return perror("pipe"), 1;
    pid_t child = fork();
    if (child < 0)
        return perror("fork"), 1;
    if (child == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
        execl(path, path, name, rounds_text, (char *)NULL);
        perror(path);
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);

    /* The consumer says its id as its runtime knows it (on Ascend not its
     * pid): export to the consumer alone, where the backend keeps pid lists,
     * and tell it ours for the notify it exports back. */
    FILE *from = fdopen(from_child[0], "r");
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, from) <= 0) {
        fprintf(stderr, "producer: the consumer sent no process id\n");
        return 1;
    }
    uint32_t pid = (uint32_t)strtoul(line, NULL, 10), mine;
    CHECK(hal_device_process_id(dev, &mine));
    hal_export_options only = {sizeof only, HAL_IMPORTERS_PIDS, &pid, 1, false};
    const hal_export_options *opts = pid_list ? &only : NULL;
    char *buffer_text, *tensor_text, *ping_text;
    CHECK(hal_export(buffer, opts, &buffer_text));
    CHECK(hal_export_tensor(tmem, &layout, opts, &tensor_text));
    CHECK(hal_notify_export(ping, opts, &ping_text));
    FILE *to = fdopen(to_child[1], "w");
    fprintf(to, "%u\n%s\n%s\n%s\n", mine, buffer_text, tensor_text, ping_text);
    fclose(to);
    hal_string_free(buffer_text);
    hal_string_free(tensor_text);
    hal_string_free(ping_text);

    /* The consumer answers with the handle of the notify it waits on. */
    if (getline(&line, &cap, from) <= 0) {
        fprintf(stderr, "producer: the consumer sent no handle\n");
        return 1;
    }
    line[strcspn(line, "\n")] = 0;
    hal_notify *pong;
    CHECK(hal_notify_import(line, NULL, &pong));
    for (int i = 0; i < rounds; i++) {
        CHECK(hal_notify_signal(pong));
        CHECK(hal_notify_wait(ping, TIMEOUT_NS));
    }
    while (getline(&line, &cap, from) > 0)
        printf("  %s", line);
    free(line);
    fclose(from);
    int wstatus;
    if (waitpid(child, &wstatus, 0) != child || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        fprintf(stderr, "producer: the consumer failed\n");
        return 1;
    }

    char answer[sizeof ANSWER];
    CHECK(hal_read(buffer, 0, answer, sizeof answer));
    if (memcmp(answer, ANSWER, sizeof ANSWER) != 0) {
        fprintf(stderr, "producer: the consumer's answer is not in the buffer\n");
        return 1;
    }
    /* The consumer has exited, so its lease is gone. */
    CHECK(hal_wait_unleased(buffer, TIMEOUT_NS));
    printf("producer: %d round trips; the consumer verified the buffer and the tensor and answered\n",
           rounds);
    CHECK(hal_notify_release(pong));
    CHECK(hal_notify_release(ping));
    CHECK(hal_memory_release(tmem));
    CHECK(hal_memory_release(buffer));
    CHECK(hal_device_release(dev));
    hal_string_free(name);
    return 0;
}
