/*
 * channels.c: a group and a channel between two processes through the C
 * library: this program forks; parent and child join a group of two,
 * all-gather their pids and broadcast, then the parent publishes 50
 * samples through 2 slots of a broadcast channel (it waits for the child
 * to release) and the child receives each in order; the refusals (a
 * buffer smaller than a slot, a busy slot, a closed channel, NULL and
 * released objects) answer their statuses.
 *
 *   channels BACKEND
 *
 * Prints "N checks passed, 0 failed" and exits 0, or names each failure.
 */
#define _GNU_SOURCE
#include <hal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SAMPLES 50
#define SLOT 256
#define TIMEOUT_NS 30000000000LL

#include "checks.h"

static void sample_text(char *out, int i) {
    snprintf(out, SLOT, "sample %d from the publisher", i);
}

/* Both processes: a group of two; each gathers the other's pid. */
static void in_a_group(const char *name, hal_group **out) {
    hal_group *g = NULL;
    EXPECT(hal_group_join(name, 2, TIMEOUT_NS, 64, &g), HAL_OK);
    *out = g;
    if (!g)
        return;
    uint32_t rank = 9, size = 9, me = (uint32_t)getpid();
    EXPECT(hal_group_rank(g, &rank, &size), HAL_OK);
    CHECK(size == 2 && rank < 2);
    unsigned char all[2 * 64];
    size_t lens[2] = {0, 0};
    EXPECT(hal_group_all_gather(g, &me, sizeof me, all, 64, lens), HAL_OK);
    uint32_t at_rank;
    memcpy(&at_rank, all + rank * 64, sizeof at_rank);
    CHECK(lens[0] == 4 && lens[1] == 4 && at_rank == me);
    uint32_t other = 0, listed = 0;
    memcpy(&other, all + (1 - rank) * 64, sizeof other);
    EXPECT(hal_group_member_pid(g, 1 - rank, &listed), HAL_OK);
    CHECK(listed == other && other != me);
    char said[64];
    size_t said_len = 0;
    const char *word = "rank 0 speaks";
    EXPECT(hal_group_broadcast(g, 0, word, rank == 0 ? strlen(word) : 0, said, sizeof said,
                               &said_len),
           HAL_OK);
    CHECK(said_len == strlen(word) && memcmp(said, word, said_len) == 0);
    EXPECT(hal_group_member_pid(g, 7, &listed), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_group_all_gather(g, &me, sizeof me, all, 2, lens), HAL_ERR_INVALID_ARGUMENT);
}

static int child(const char *backend, const char *group_name, const char *channel) {
    hal_group *g;
    in_a_group(group_name, &g);
    hal_device *dev = NULL;
    EXPECT(hal_device_open(backend, 0, &dev), HAL_OK);
    hal_subscriber *sub = NULL;
    uint64_t slot_size = 0;
    EXPECT(hal_subscriber_open(dev, channel, &sub, &slot_size), HAL_OK);
    CHECK(slot_size == SLOT);
    EXPECT(hal_group_barrier(g), HAL_OK); /* subscribed: the parent publishes */
    char buf[SLOT], want[SLOT];
    size_t len = 0;
    uint64_t seq = 99;
    EXPECT(hal_receive(sub, TIMEOUT_NS, buf, SLOT - 1, &len, &seq), HAL_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < SAMPLES; i++) {
        EXPECT(hal_receive(sub, TIMEOUT_NS, buf, sizeof buf, &len, &seq), HAL_OK);
        sample_text(want, i);
        CHECK(seq == (uint64_t)i && len == strlen(want) + 1 && memcmp(buf, want, len) == 0);
    }
    /* The publisher closes once every sample was received. */
    EXPECT(hal_receive(sub, TIMEOUT_NS, buf, sizeof buf, &len, &seq), HAL_ERR_CLOSED);
    EXPECT(hal_subscriber_release(sub), HAL_OK);
    EXPECT(hal_subscriber_release(sub), HAL_ERR_DOUBLE_RELEASE);
    EXPECT(hal_group_release(g), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "cpu-shm";
    char group_name[64], channel[64];
    snprintf(group_name, sizeof group_name, "c-test-group-%d", (int)getpid());
    snprintf(channel, sizeof channel, "c-test-channel-%d", (int)getpid());

    hal_device *dev = NULL;
    EXPECT(hal_device_open(backend, 0, &dev), HAL_OK);
    hal_channel_options opts = {sizeof opts, 2, SLOT, HAL_CHANNEL_BROADCAST, TIMEOUT_NS};
    hal_publisher *pub = NULL;
    EXPECT(hal_publisher_create(dev, channel, &opts, &pub), HAL_OK);
    hal_publisher *again = NULL;
    EXPECT(hal_publisher_create(dev, channel, &opts, &again), HAL_ERR_ALREADY_EXISTS);
    hal_channel_options bad = {sizeof bad, 2, SLOT, 7, 0};
    EXPECT(hal_publisher_create(dev, "c-test-bad-mode", &bad, &again), HAL_ERR_INVALID_ARGUMENT);
    EXPECT(hal_publish(NULL, "x", 1, true, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_publish((hal_publisher *)(uintptr_t)0x51, "x", 1, true, NULL), HAL_ERR_INVALID_OBJECT);
    EXPECT(hal_group_join(NULL, 2, 0, 0, NULL), HAL_ERR_NULL_ARGUMENT);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child uses only what it opens itself, and counts its own. */
        passed = failed = 0;
        _exit(child(backend, group_name, channel));
    }
    hal_group *g;
    in_a_group(group_name, &g);
    EXPECT(hal_group_barrier(g), HAL_OK); /* the child subscribed */
    char text[SLOT];
    for (int i = 0; i < SAMPLES; i++) {
        sample_text(text, i);
        uint64_t seq = 99;
        EXPECT(hal_publish(pub, text, strlen(text) + 1, true, &seq), HAL_OK);
        CHECK(seq == (uint64_t)i);
    }
    EXPECT(hal_publisher_release(pub), HAL_OK);
    EXPECT(hal_publisher_release(pub), HAL_ERR_DOUBLE_RELEASE);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(hal_group_release(g), HAL_OK);

    /* A busy slot: one slot, a subscriber that holds nothing back yet. */
    hal_channel_options one = {sizeof one, 1, SLOT, HAL_CHANNEL_QUEUE, 0};
    EXPECT(hal_publisher_create(dev, channel, &one, &pub), HAL_OK);
    hal_subscriber *sub = NULL;
    EXPECT(hal_subscriber_open(dev, channel, &sub, NULL), HAL_OK);
    EXPECT(hal_publish(pub, "a", 2, false, NULL), HAL_OK);
    EXPECT(hal_publish(pub, "b", 2, false, NULL), HAL_ERR_BUSY);
    char buf[SLOT];
    size_t len = 0;
    EXPECT(hal_receive(sub, 0, buf, sizeof buf, &len, NULL), HAL_OK);
    CHECK(len == 2 && buf[0] == 'a');
    EXPECT(hal_receive(sub, 0, buf, sizeof buf, &len, NULL), HAL_ERR_TIMEOUT);
    EXPECT(hal_publish(pub, "b", 2, false, NULL), HAL_OK);
    EXPECT(hal_subscriber_release(sub), HAL_OK);
    EXPECT(hal_publisher_release(pub), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);

    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
