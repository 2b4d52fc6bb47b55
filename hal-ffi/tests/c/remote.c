/*
 * remote.c: memory and a notify carried between two processes by the
 * hal_remote_* calls, over the loopback address. The program forks before
 * any hal call; the parent exports CPU shared memory (read-write, and
 * another read-only) and a notify from its node and hands their texts to
 * the child through a pipe; the child connects from a node of its own,
 * reads, writes, reads into local hal memory and writes from it, writes
 * and signals, signals the notify, and is refused writes to the read-only
 * export and texts of the wrong kind; the parent checks every byte and
 * waits until the child has let go.
 *
 *   remote
 *
 * Prints "N checks passed, 0 failed" and exits 0, or names each failure;
 * prints "UCX unavailable: ..." and exits 2 where UCX cannot be loaded.
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SIZE (1 << 20)
#define TIMEOUT_NS 30000000000LL
#define TEXT_MAX 256

#include "checks.h"

static unsigned char pattern(size_t i) {
    return (unsigned char)(i % 251);
}

/* Whether `len` bytes at `bytes` are the pattern from offset `from`. */
static int is_pattern(const unsigned char *bytes, size_t from, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (bytes[i] != pattern(from + i))
            return 0;
    return 1;
}

/* Read one line (a handle text) from `in` into `out`, without its newline. */
static int read_line(FILE *in, char *out) {
    if (!fgets(out, TEXT_MAX, in))
        return 0;
    out[strcspn(out, "\n")] = '\0';
    return 1;
}

static int child(int from_parent) {
    FILE *in = fdopen(from_parent, "r");
    char text[TEXT_MAX], text_ro[TEXT_MAX], text_notify[TEXT_MAX];
    if (!in || !read_line(in, text) || strcmp(text, "unavailable") == 0 ||
        !read_line(in, text_ro) || !read_line(in, text_notify))
        return 3;
    fclose(in);
    hal_device *dev = NULL;
    EXPECT(hal_device_open("cpu-shm", 0, &dev), HAL_OK);
    hal_remote_node *node = NULL;
    EXPECT(hal_remote_node_bind("127.0.0.1:0", &node), HAL_OK);

    hal_remote_memory *r = NULL;
    EXPECT(hal_remote_connect(node, text, &r), HAL_OK);
    uint64_t size = 0;
    EXPECT(hal_remote_size(r, &size), HAL_OK);
    CHECK(size == SIZE);
    static unsigned char got[5000];
    EXPECT(hal_remote_read(r, 1000, got, sizeof got), HAL_OK);
    CHECK(is_pattern(got, 1000, sizeof got));

    /* Written and flushed. */
    unsigned char sevens[300];
    memset(sevens, 7, sizeof sevens);
    EXPECT(hal_remote_write(r, 4096, sevens, sizeof sevens), HAL_OK);
    EXPECT(hal_remote_flush(r), HAL_OK);

    /* Into local hal memory, and from it to another place. */
    hal_memory *local = NULL;
    EXPECT(hal_alloc(dev, 8192, HAL_LOCATION_HOST, &local), HAL_OK);
    EXPECT(hal_remote_read_into(r, 1000, local, 100, 300), HAL_OK);
    unsigned char landed[300];
    EXPECT(hal_read(local, 100, landed, sizeof landed), HAL_OK);
    CHECK(is_pattern(landed, 1000, sizeof landed));
    EXPECT(hal_remote_write_from(r, 65536, local, 100, 300), HAL_OK);
    EXPECT(hal_remote_flush(r), HAL_OK);

    /* Out of range: refused before anything is sent. */
    EXPECT(hal_remote_read(r, SIZE - 2, got, 3), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_remote_read_into(r, 0, local, 8000, 300), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_remote_read(r, 0, NULL, 3), HAL_ERR_NULL_ARGUMENT);

    /* Written, then signalled: the parent finds the bytes there. */
    EXPECT(hal_remote_write_signal(r, 9000, "signalled", 9), HAL_OK);

    /* The read-only export: read, never written. */
    hal_remote_memory *ro = NULL;
    EXPECT(hal_remote_connect(node, text_ro, &ro), HAL_OK);
    EXPECT(hal_remote_write(ro, 0, sevens, 16), HAL_ERR_PERMISSION_DENIED);
    EXPECT(hal_remote_write_signal(ro, 0, sevens, 16), HAL_ERR_PERMISSION_DENIED);
    EXPECT(hal_remote_write_from(ro, 0, local, 0, 16), HAL_ERR_PERMISSION_DENIED);
    EXPECT(hal_remote_read(ro, 10, got, 100), HAL_OK);
    CHECK(is_pattern(got, 10, 100));

    /* The notify. */
    hal_remote_notify *n = NULL;
    EXPECT(hal_remote_connect_notify(node, text_notify, &n), HAL_OK);
    EXPECT(hal_remote_notify_signal(n), HAL_OK);

    /* Texts of the wrong kind, and no text at all. */
    hal_remote_memory *wrong = NULL;
    EXPECT(hal_remote_connect(node, text_notify, &wrong), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_remote_connect(node, "hal1r.AAAA", &wrong), HAL_ERR_INVALID_HANDLE);
    EXPECT(hal_remote_connect(node, NULL, &wrong), HAL_ERR_NULL_ARGUMENT);
    hal_remote_notify *wrong_notify = NULL;
    EXPECT(hal_remote_connect_notify(node, text, &wrong_notify), HAL_ERR_INVALID_HANDLE);

    EXPECT(hal_remote_notify_release(n), HAL_OK);
    EXPECT(hal_remote_memory_release(ro), HAL_OK);
    EXPECT(hal_remote_memory_release(r), HAL_OK);
    EXPECT(hal_remote_memory_release(r), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_remote_read(r, 0, got, 1), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_memory_release(local), HAL_OK);
    EXPECT(hal_remote_node_release(node), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    return failed ? 1 : 0;
}

/* The text of `export`, followed by a newline, to `out`. */
static void send_text(FILE *out, hal_remote_exported *export) {
    char *text = NULL;
    EXPECT(hal_remote_export_text(export, &text), HAL_OK);
    CHECK(text && strncmp(text, "hal1r.", 6) == 0 && strlen(text) < TEXT_MAX);
    fprintf(out, "%s\n", text ? text : "");
    hal_string_free(text);
}

int main(void) {
    int to_child[2];
    if (pipe(to_child) != 0) {
        perror("pipe");
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* No hal object was made before the fork: the child makes its own. */
        close(to_child[1]);
        _exit(child(to_child[0]));
    }
    close(to_child[0]);
    FILE *out = fdopen(to_child[1], "w");

    /* The exporter's node names its address itself, with a timeout of its
     * own; the child's takes the defaults. */
    hal_remote_node *node = NULL;
    hal_remote_node_options opts = {sizeof opts, "127.0.0.1", 20000000000LL, 0};
    hal_status bound = hal_remote_node_bind_with("127.0.0.1:0", &opts, &node);
    if (bound == HAL_ERR_UNAVAILABLE) {
        printf("UCX unavailable: %s\n", hal_last_error());
        fprintf(out, "unavailable\n");
        fclose(out);
        waitpid(pid, NULL, 0);
        return 2;
    }
    EXPECT(bound, HAL_OK);
    hal_remote_node *refused = NULL;
    EXPECT(hal_remote_node_bind("0.0.0.0:0", &refused), HAL_ERR_INVALID_ARGUMENT);
    hal_remote_node_options bad = {sizeof bad, "not an address", 0, 0};
    EXPECT(hal_remote_node_bind_with("0.0.0.0:0", &bad, &refused), HAL_ERR_INVALID_ARGUMENT);
    char *address = NULL;
    EXPECT(hal_remote_node_address(node, &address), HAL_OK);
    CHECK(address && strncmp(address, "127.0.0.1:", 10) == 0 && strcmp(address, "127.0.0.1:0"));
    hal_string_free(address);

    hal_device *dev = NULL;
    EXPECT(hal_device_open("cpu-shm", 0, &dev), HAL_OK);
    hal_memory *mem = NULL, *ro_mem = NULL;
    EXPECT(hal_alloc(dev, SIZE, HAL_LOCATION_HOST, &mem), HAL_OK);
    EXPECT(hal_alloc(dev, 4096, HAL_LOCATION_HOST, &ro_mem), HAL_OK);
    unsigned char *bytes = NULL, *ro_bytes = NULL;
    EXPECT(hal_memory_host_ptr(mem, (void **)&bytes), HAL_OK);
    EXPECT(hal_memory_host_ptr(ro_mem, (void **)&ro_bytes), HAL_OK);
    for (size_t i = 0; bytes && i < SIZE; i++)
        bytes[i] = pattern(i);
    for (size_t i = 0; ro_bytes && i < 4096; i++)
        ro_bytes[i] = pattern(i);
    hal_notify *notify = NULL;
    EXPECT(hal_notify_create(dev, &notify), HAL_OK);

    hal_remote_exported *exp = NULL, *exp_ro = NULL, *exp_notify = NULL;
    EXPECT(hal_remote_export(node, mem, false, &exp), HAL_OK);
    EXPECT(hal_remote_export(node, ro_mem, true, &exp_ro), HAL_OK);
    EXPECT(hal_remote_export_notify(node, notify, &exp_notify), HAL_OK);
    EXPECT(hal_remote_export(node, NULL, false, &exp), HAL_ERR_NULL_ARGUMENT);
    send_text(out, exp);
    send_text(out, exp_ro);
    send_text(out, exp_notify);
    fclose(out);

    EXPECT(hal_remote_export_wait_importers(exp, 1, TIMEOUT_NS), HAL_OK);
    /* The child writes, then writes and signals: every byte is here. */
    EXPECT(hal_remote_export_wait_signal(exp, TIMEOUT_NS), HAL_OK);
    unsigned char sevens[300];
    memset(sevens, 7, sizeof sevens);
    CHECK(bytes && memcmp(bytes + 4096, sevens, sizeof sevens) == 0);
    CHECK(bytes && is_pattern(bytes + 65536, 1000, 300));
    CHECK(bytes && memcmp(bytes + 9000, "signalled", 9) == 0);
    /* Each signal is taken once. */
    EXPECT(hal_remote_export_wait_signal(exp, 0), HAL_ERR_TIMEOUT);
    EXPECT(hal_notify_wait(notify, TIMEOUT_NS), HAL_OK);
    /* The read-only memory is as it was. */
    CHECK(ro_bytes && is_pattern(ro_bytes, 0, 4096));

    /* The child lets go; then it has exited. */
    EXPECT(hal_remote_export_wait_unused(exp, TIMEOUT_NS), HAL_OK);
    size_t importers = 9;
    EXPECT(hal_remote_export_importers(exp, &importers), HAL_OK);
    CHECK(importers == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

    EXPECT(hal_remote_export_release(exp_notify), HAL_OK);
    EXPECT(hal_remote_export_release(exp_ro), HAL_OK);
    EXPECT(hal_remote_export_release(exp), HAL_OK);
    EXPECT(hal_remote_export_release(exp), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_notify_release(notify), HAL_OK);
    EXPECT(hal_memory_release(ro_mem), HAL_OK);
    EXPECT(hal_memory_release(mem), HAL_OK);
    EXPECT(hal_remote_node_release(node), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);

    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
