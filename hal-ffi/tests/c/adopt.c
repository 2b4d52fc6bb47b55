/*
 * adopt.c: memory another library allocated, adopted by address through
 * the C library. Here the "other library" is hal itself (the simulator
 * knows only its own allocations): a range inside an allocation is
 * adopted by its device address, exported, imported by a forked child that
 * writes into it, and the write lands in the original allocation; the
 * adopted memory counts its importer, and releasing it frees nothing.
 * Ranges that leave the allocation or have no bytes are refused; a
 * backend that cannot adopt answers HAL_ERR_UNSUPPORTED.
 *
 *   adopt BACKEND
 *   adopt BACKEND --import HANDLE PAGE    (the importing process)
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

#define PAGES 4
#define TIMEOUT_NS 30000000000LL

#include "checks.h"

static int importer(const char *text, size_t page) {
    hal_memory *m = NULL;
    EXPECT(hal_import(text, NULL, &m), HAL_OK);
    uint64_t size = 0;
    EXPECT(hal_memory_size(m, &size), HAL_OK);
    CHECK(size == 2 * page);
    char got[8] = {0};
    EXPECT(hal_read(m, 0, got, 8), HAL_OK);
    CHECK(memcmp(got, "adopted", 8) == 0);
    EXPECT(hal_write(m, 0, "child!!", 8), HAL_OK);
    EXPECT(hal_memory_release(m), HAL_OK);
    fflush(stdout);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *backend = argc > 1 ? argv[1] : "mock-cuda";
    if (argc > 4 && strcmp(argv[2], "--import") == 0) {
        int rc = importer(argv[3], (size_t)strtoull(argv[4], NULL, 10));
        printf("importer: %d checks passed, %d failed\n", passed, failed);
        return rc;
    }
    hal_device *dev = NULL;
    EXPECT(hal_device_open(backend, 0, &dev), HAL_OK);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    hal_memory *owner = NULL;
    /* Device memory, or host memory where the device has only that. */
    if (hal_alloc(dev, PAGES * page, HAL_LOCATION_DEVICE, &owner) == HAL_ERR_UNSUPPORTED)
        EXPECT(hal_alloc(dev, PAGES * page, HAL_LOCATION_HOST, &owner), HAL_OK);
    CHECK(owner != NULL);
    uint64_t base = 0;
    EXPECT(hal_memory_device_ptr(owner, &base), HAL_OK);
    hal_memory *adopted = NULL;
    hal_status st = hal_adopt(dev, base + page, 2 * page, &adopted);
    if (st == HAL_ERR_UNSUPPORTED) {
        /* This backend cannot adopt memory: said so, and nothing made. */
        CHECK(adopted == NULL && strstr(hal_last_error(), "adopt") != NULL);
        EXPECT(hal_memory_release(owner), HAL_OK);
        EXPECT(hal_device_release(dev), HAL_OK);
        printf("unsupported on %s\n", backend);
        printf("%d checks passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
    }
    EXPECT(st, HAL_OK);
    uint64_t at = 0, size = 0;
    EXPECT(hal_memory_device_ptr(adopted, &at), HAL_OK);
    EXPECT(hal_memory_size(adopted, &size), HAL_OK);
    CHECK(at == base + page && size == 2 * page);
    EXPECT(hal_write(owner, page, "adopted", 8), HAL_OK);
    char got[8] = {0};
    EXPECT(hal_read(adopted, 0, got, 8), HAL_OK);
    CHECK(memcmp(got, "adopted", 8) == 0);
    char *text = NULL;
    EXPECT(hal_export(adopted, NULL, &text), HAL_OK);
    fflush(stdout);
    char page_arg[32];
    snprintf(page_arg, sizeof page_arg, "%zu", page);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], backend, "--import", text, page_arg, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(hal_wait_unleased(adopted, TIMEOUT_NS), HAL_OK);
    size_t importers = 9;
    EXPECT(hal_importers(adopted, &importers), HAL_OK);
    CHECK(importers == 0);
    EXPECT(hal_read(owner, page, got, 8), HAL_OK);
    CHECK(memcmp(got, "child!!", 8) == 0);
    hal_string_free(text);
    EXPECT(hal_memory_release(adopted), HAL_OK);
    /* Releasing the adopted range freed nothing: the owner reads on. */
    EXPECT(hal_read(owner, page, got, 8), HAL_OK);
    CHECK(memcmp(got, "child!!", 8) == 0);

    hal_memory *bad = NULL;
    /* Refused by hal's own check or by the vendor's lookup. */
    st = hal_adopt(dev, base + 3 * page, 2 * page, &bad);
    CHECK((st == HAL_ERR_INVALID_ARGUMENT || st == HAL_ERR_VENDOR) && bad == NULL);
    st = hal_adopt(dev, base, 0, &bad);
    CHECK((st == HAL_ERR_INVALID_ARGUMENT || st == HAL_ERR_VENDOR) && bad == NULL);
    EXPECT(hal_adopt(dev, base, page, NULL), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_adopt(NULL, base, page, &bad), HAL_ERR_NULL_ARGUMENT);
    EXPECT(hal_memory_release(owner), HAL_OK);
    EXPECT(hal_device_release(dev), HAL_OK);
    printf("%d checks passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
