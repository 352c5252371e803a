// The C++ wrapper: RAII, move-only types, exceptions with the errno.
#include <pagewise.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#define EXPECT(cond)                                                                          \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);          \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

static_assert(!std::is_copy_constructible_v<pagewise::Writer>, "move-only");
static_assert(!std::is_copy_assignable_v<pagewise::Reader>, "move-only");
static_assert(std::is_nothrow_move_constructible_v<pagewise::Region>, "movable");
static_assert(std::is_nothrow_move_assignable_v<pagewise::Buffer>, "movable");

template <typename F>
static int error_code(F f) {
    try {
        f();
    } catch (const pagewise::Error &e) {
        return e.code();
    }
    return 0;
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    std::string path = std::string(argv[1]) + "/q";
    EXPECT(pagewise::version() == pw_version());
    std::vector<std::uint64_t> positions;
    {
        pagewise::Writer w(path);
        w.prepare(1 << 20);
        for (int i = 0; i < 100; i++) {
            positions.push_back(w.append("record " + std::to_string(i)));
        }
        {
            auto slot = w.reserve(5);
            std::memcpy(slot.data(), "zero!", 5);
            EXPECT(error_code([&] { w.append("x"); }) == -EINPROGRESS);
            positions.push_back(slot.commit());
        }
        {
            auto dropped = w.reserve(7); // destroyed uncommitted: appends nothing
            std::memcpy(dropped.data(), "dropped", 7);
        }
        EXPECT(error_code([&] { w.append(std::string(w.max_payload() + 1, 'x')); }) == -EMSGSIZE);
        EXPECT(error_code([&] { pagewise::Writer second(path); }) == -EBUSY);
        pagewise::Writer moved(std::move(w));
        EXPECT(error_code([&] { w.append("x"); }) == -EBADF); // NOLINT: use after move on purpose
        moved.flush();
        moved.close();
        EXPECT(error_code([&] { moved.append("x"); }) == -EBADF);
    }
    pagewise::Reader r(path);
    std::uint64_t reached = r.prepare(1 << 20);
    EXPECT(reached > positions[99] && reached <= positions[0] + (1 << 20));
    for (int i = 0; i < 100; i++) {
        auto rec = r.next();
        EXPECT(rec && rec->data == "record " + std::to_string(i));
        EXPECT(rec->position == positions[static_cast<std::size_t>(i)]);
    }
    auto rec = r.next();
    EXPECT(rec && rec->data == "zero!");
    EXPECT(!r.next());
    EXPECT(!r.next_wait(std::chrono::milliseconds(5)));
    r.seek(positions[42]);
    EXPECT(r.next()->data == "record 42");
    EXPECT(error_code([] { pagewise::Reader missing("/nonexistent/q"); }) == -ENOENT);

    pagewise::Region region(1 << 20);
    std::memset(region.data(), 1, region.size());
    pw_backing b = region.backing();
    EXPECT(b.requested_bytes == (1 << 20) && b.why != nullptr);
    pagewise::Region other = std::move(region);
    EXPECT(other.size() == (1 << 20));

    pagewise::Buffer buf(1 << 16);
    buf.resize(10, 'a');
    buf.append("bc");
    EXPECT(buf.size() == 12 && static_cast<char *>(buf.data())[11] == 'c');

    char src[100], dst[100];
    std::memset(src, 7, sizeof src);
    pagewise::copy(dst, src, sizeof dst);
    EXPECT(std::memcmp(dst, src, sizeof dst) == 0);
    pagewise::fill(dst, 9, sizeof dst);
    EXPECT(dst[99] == 9);
    EXPECT(error_code([&] { pagewise::copy(src + 1, src, 10); }) == -EINVAL);
    std::printf("ok\n");
    return 0;
}
