// producer.cpp: producer.c in C++17, against the same header and library,
// with the same consumer (consumer.c): a buffer, a tensor and a notify
// ping-pong shared with another process. Objects are owned by unique_ptr
// with the library's release functions as deleters; a failure throws.
//
//   c++ -std=c++17 -Wall -Wextra -o producer_cpp producer.cpp $(pkg-config --cflags --libs hal-ipc)
//   ./producer_cpp [BACKEND] [ROUNDS]

#include <hal.h>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr uint64_t kSize = 1u << 20;
constexpr int64_t kTimeoutNs = 10'000'000'000LL;
constexpr char kAnswer[] = "verified by the consumer";

void check(hal_status status, const char *what) {
    if (status != HAL_OK)
        throw std::runtime_error(std::string(what) + ": status " + std::to_string(status) + ": " +
                                 hal_last_error());
}
#define CHECK(call) check((call), #call)

template <typename T, hal_status (*Release)(T *)> struct Releaser {
    void operator()(T *object) const { Release(object); }
};
using Device = std::unique_ptr<hal_device, Releaser<hal_device, hal_device_release>>;
using MemoryPtr = std::unique_ptr<hal_memory, Releaser<hal_memory, hal_memory_release>>;
using Notify = std::unique_ptr<hal_notify, Releaser<hal_notify, hal_notify_release>>;

// A string the library handed out, as a std::string.
std::string take(char *text) {
    std::string out(text);
    hal_string_free(text);
    return out;
}

unsigned char pattern(uint64_t i) { return static_cast<unsigned char>((i * 31 + 7) % 251); }

std::string consumer_path() {
    if (const char *env = std::getenv("HAL_EXAMPLE_CONSUMER"))
        return env;
    std::vector<char> self(PATH_MAX, 0);
    ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
    std::string path = n > 0 ? std::string(self.data(), static_cast<size_t>(n)) : "./x";
    return path.substr(0, path.rfind('/')) + "/consumer";
}

int run(const char *backend, int rounds) {
    hal_device *raw_dev = nullptr;
    CHECK(hal_device_open(backend, 0, &raw_dev));
    Device dev(raw_dev);
    char *raw_name = nullptr;
    CHECK(hal_device_backend(dev.get(), &raw_name));
    std::string name = take(raw_name);
    std::printf("producer (C++) %d: backend %s\n", static_cast<int>(getpid()), name.c_str());

    bool host_visible = false, pid_list = false;
    CHECK(hal_device_has(dev.get(), "memory-is-host", &host_visible));
    CHECK(hal_device_has(dev.get(), "pid-allow-list", &pid_list));
    hal_location where = host_visible ? HAL_LOCATION_HOST : HAL_LOCATION_DEVICE;

    hal_memory *raw = nullptr;
    CHECK(hal_alloc(dev.get(), kSize, where, &raw));
    MemoryPtr buffer(raw);
    std::vector<unsigned char> bytes(kSize);
    for (uint64_t i = 0; i < kSize; i++)
        bytes[i] = pattern(i);
    CHECK(hal_write(buffer.get(), 0, bytes.data(), bytes.size()));

    CHECK(hal_alloc(dev.get(), 65536, where, &raw));
    MemoryPtr tmem(raw);
    std::vector<float> values(16 * 64);
    for (size_t i = 0; i < values.size(); i++)
        values[i] = static_cast<float>(i) / 2.0f;
    CHECK(hal_write(tmem.get(), 0, values.data(), values.size() * sizeof(float)));
    int64_t shape[2] = {16, 64};
    DLTensor layout{};
    layout.ndim = 2;
    layout.shape = shape;
    layout.dtype = DLDataType{kDLFloat, 32, 1};

    hal_notify *raw_ping = nullptr;
    CHECK(hal_notify_create(dev.get(), &raw_ping));
    Notify ping(raw_ping);

    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0)
        throw std::runtime_error("pipe failed");
    std::string path = consumer_path(), rounds_text = std::to_string(rounds);
    pid_t child = fork();
    if (child < 0)
        throw std::runtime_error("fork failed");
    if (child == 0) {
        dup2(to_child[0], 0);
        dup2(from_child[1], 1);
        close(to_child[0]), close(to_child[1]), close(from_child[0]), close(from_child[1]);
        execl(path.c_str(), path.c_str(), name.c_str(), rounds_text.c_str(),
              static_cast<char *>(nullptr));
        std::perror(path.c_str());
        _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);

    // The consumer's id as its runtime knows it (on Ascend not its pid),
    // for the pid lists; ours goes back for the notify it exports to us.
    FILE *from = fdopen(from_child[0], "r");
    char *line = nullptr;
    size_t cap = 0;
    if (getline(&line, &cap, from) <= 0)
        throw std::runtime_error("the consumer sent no process id");
    uint32_t pid = static_cast<uint32_t>(std::strtoul(line, nullptr, 10));
    uint32_t mine = 0;
    CHECK(hal_device_process_id(dev.get(), &mine));
    hal_export_options only{sizeof only, HAL_IMPORTERS_PIDS, &pid, 1, false};
    const hal_export_options *opts = pid_list ? &only : nullptr;
    char *text = nullptr;
    CHECK(hal_export(buffer.get(), opts, &text));
    std::string buffer_text = take(text);
    CHECK(hal_export_tensor(tmem.get(), &layout, opts, &text));
    std::string tensor_text = take(text);
    CHECK(hal_notify_export(ping.get(), opts, &text));
    std::string ping_text = take(text);
    FILE *to = fdopen(to_child[1], "w");
    std::fprintf(to, "%u\n%s\n%s\n%s\n", mine, buffer_text.c_str(), tensor_text.c_str(),
                 ping_text.c_str());
    std::fclose(to);

    if (getline(&line, &cap, from) <= 0)
        throw std::runtime_error("the consumer sent no handle");
    line[std::strcspn(line, "\n")] = 0;
    hal_notify *raw_pong = nullptr;
    CHECK(hal_notify_import(line, nullptr, &raw_pong));
    Notify pong(raw_pong);
    for (int i = 0; i < rounds; i++) {
        CHECK(hal_notify_signal(pong.get()));
        CHECK(hal_notify_wait(ping.get(), kTimeoutNs));
    }
    while (getline(&line, &cap, from) > 0)
        std::printf("  %s", line);
    std::free(line);
    std::fclose(from);
    int wstatus = 0;
    if (waitpid(child, &wstatus, 0) != child || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
        throw std::runtime_error("the consumer failed");

    char answer[sizeof kAnswer];
    CHECK(hal_read(buffer.get(), 0, answer, sizeof answer));
    if (std::memcmp(answer, kAnswer, sizeof kAnswer) != 0)
        throw std::runtime_error("the consumer's answer is not in the buffer");
    CHECK(hal_wait_unleased(buffer.get(), kTimeoutNs));
    std::printf("producer (C++): %d round trips; the consumer verified the buffer and the tensor "
                "and answered\n",
                rounds);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    try {
        return run(argc > 1 ? argv[1] : nullptr, argc > 2 ? std::atoi(argv[2]) : 100);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "producer (C++): %s\n", e.what());
        return 1;
    }
}
