/*
 * pagewise.hpp: a header-only C++17 wrapper over pagewise.h.
 *
 * Move-only RAII types (pagewise::Writer, Reader, Region, Buffer) that close
 * their handle in the destructor, and pagewise::Error (a std::runtime_error
 * with the negative errno in code()) thrown for every failure. The thread
 * rules are those of the C handles: a Writer, Reader or Buffer is used by
 * one thread at a time; a Region by any number. A moved-from object holds
 * no handle: calling it throws Error with code() == -EBADF.
 *
 * Link with libpagewise: c++ -std=c++17 prog.cpp $(pkg-config --cflags --libs pagewise)
 */
#ifndef PAGEWISE_HPP
#define PAGEWISE_HPP

#include "pagewise.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace pagewise {

/* A failed pagewise call: what() is pw_last_error(), code() the negative errno. */
class Error : public std::runtime_error {
public:
    Error(int code, const std::string &message) : std::runtime_error(message), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

namespace detail {
/* Throws Error for a negative return code; returns the others. */
inline int check(int rc) {
    if (rc < 0) {
        throw Error(rc, pw_last_error());
    }
    return rc;
}

/* Owns one handle; `close` is the C function that frees it. */
template <typename Handle, int (*close)(Handle *)>
class Owned {
public:
    Owned() noexcept = default;
    explicit Owned(Handle *h) noexcept : h_(h) {}
    Owned(const Owned &) = delete;
    Owned &operator=(const Owned &) = delete;
    Owned(Owned &&other) noexcept : h_(std::exchange(other.h_, nullptr)) {}
    Owned &operator=(Owned &&other) noexcept {
        if (this != &other) {
            reset();
            h_ = std::exchange(other.h_, nullptr);
        }
        return *this;
    }
    ~Owned() { reset(); }
    Handle *get() const noexcept { return h_; }
    /* Gives up ownership: the caller closes the handle. */
    Handle *release() noexcept { return std::exchange(h_, nullptr); }
    void reset() noexcept {
        if (h_ != nullptr) {
            (void)close(h_);
            h_ = nullptr;
        }
    }

private:
    Handle *h_ = nullptr;
};
} // namespace detail

/* The library's version at run time ("MAJOR.MINOR.PATCH"). */
inline std::string_view version() { return pw_version(); }

/* Copies n bytes (no overlap) with pagewise's copy plan. */
inline void copy(void *dst, const void *src, std::size_t n) { detail::check(pw_copy(dst, src, n)); }

/* Sets n bytes to byte with pagewise's fill plan. */
inline void fill(void *dst, int byte, std::size_t n) { detail::check(pw_fill(dst, byte, n)); }

/* One record: the bytes belong to the Reader until its next call. */
struct Record {
    std::string_view data;
    std::uint64_t position;
};

/* The single writer of a queue. */
class Writer {
public:
    /* Zero-copy room for one record: fill data(), then commit(). Destroyed
     * uncommitted (or after its Writer), it appends nothing. While it is
     * open, the Writer's other calls throw Error(-EINPROGRESS). */
    class Reservation {
    public:
        Reservation(const Reservation &) = delete;
        Reservation &operator=(const Reservation &) = delete;
        Reservation(Reservation &&other) noexcept
            : w_(std::exchange(other.w_, nullptr)), data_(other.data_), size_(other.size_) {}
        Reservation &operator=(Reservation &&other) noexcept {
            if (this != &other) {
                cancel();
                w_ = std::exchange(other.w_, nullptr);
                data_ = other.data_;
                size_ = other.size_;
            }
            return *this;
        }
        ~Reservation() { cancel(); }
        void *data() const noexcept { return data_; }
        std::size_t size() const noexcept { return size_; }
        /* Publishes the record; returns its position. */
        std::uint64_t commit() {
            std::uint64_t position = 0;
            detail::check(pw_queue_commit(w_, &position));
            w_ = nullptr;
            return position;
        }
        /* Drops the record (nothing is appended). */
        void cancel() noexcept {
            if (w_ != nullptr) {
                (void)pw_queue_cancel(w_);
                w_ = nullptr;
            }
        }

    private:
        friend class Writer;
        Reservation(pw_queue_writer *w, void *data, std::size_t size) noexcept
            : w_(w), data_(data), size_(size) {}
        pw_queue_writer *w_;
        void *data_;
        std::size_t size_;
    };

    /* Opens (or creates) the queue at path; options may be null (defaults). */
    explicit Writer(const std::string &path, const pw_queue_options *options = nullptr) {
        pw_queue_writer *w = nullptr;
        detail::check(pw_queue_writer_open(path.c_str(), options, &w));
        h_ = Handle(w);
    }

    std::uint64_t append(const void *data, std::size_t len) {
        std::uint64_t position = 0;
        detail::check(pw_queue_append(h_.get(), data, len, &position));
        return position;
    }
    std::uint64_t append(std::string_view bytes) { return append(bytes.data(), bytes.size()); }

    Reservation reserve(std::size_t len) {
        void *buf = nullptr;
        detail::check(pw_queue_reserve(h_.get(), len, &buf));
        return Reservation(h_.get(), buf, len);
    }

    void flush() { detail::check(pw_queue_flush(h_.get())); }

    /* Allocates (and with pre-touch maps in) the next `bytes` after the
       writer's position now, about 2.5 us per 4 KiB page on tmpfs: before a
       latency-critical phase. Not capped: the file grows by `bytes`. */
    void prepare(std::uint64_t bytes) { detail::check(pw_queue_prepare(h_.get(), bytes)); }

    std::size_t max_payload() const {
        std::size_t max = 0;
        detail::check(pw_queue_max_payload(h_.get(), &max));
        return max;
    }

    /* Closes now (the destructor does it otherwise). */
    void close() { detail::check(pw_queue_writer_close(h_.release())); }

    pw_queue_writer *handle() const noexcept { return h_.get(); }

private:
    using Handle = detail::Owned<pw_queue_writer, pw_queue_writer_close>;
    Handle h_;
};

/* A reader of a queue, from its oldest record. */
class Reader {
public:
    explicit Reader(const std::string &path) {
        pw_queue_reader *r = nullptr;
        detail::check(pw_queue_reader_open(path.c_str(), &r));
        h_ = Handle(r);
    }

    /* The next record, or nothing yet. Never blocks. */
    std::optional<Record> next() {
        const void *data = nullptr;
        std::size_t len = 0;
        std::uint64_t position = 0;
        if (detail::check(pw_queue_next(h_.get(), &data, &len, &position)) == PW_EMPTY) {
            return std::nullopt;
        }
        return Record{std::string_view(static_cast<const char *>(data), len), position};
    }

    /* The next record, waiting up to timeout (forever if negative). */
    std::optional<Record> next_wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1)) {
        const void *data = nullptr;
        std::size_t len = 0;
        std::uint64_t position = 0;
        int rc = detail::check(pw_queue_next_wait(h_.get(), static_cast<std::int64_t>(timeout.count()),
                                                  &data, &len, &position));
        if (rc == PW_EMPTY) {
            return std::nullopt;
        }
        return Record{std::string_view(static_cast<const char *>(data), len), position};
    }

    /* A position from a read or append, PW_SEEK_START or PW_SEEK_END. */
    void seek(std::uint64_t position) { detail::check(pw_queue_seek(h_.get(), position)); }

    /* Maps in the next `bytes` the file holds (about 0.25 us per 4 KiB page),
       so reading them takes no page fault; returns the position reached. */
    std::uint64_t prepare(std::uint64_t bytes) {
        std::uint64_t reached = 0;
        detail::check(pw_queue_reader_prepare(h_.get(), bytes, &reached));
        return reached;
    }

    pw_queue_reader *handle() const noexcept { return h_.get(); }

private:
    using Handle = detail::Owned<pw_queue_reader, pw_queue_reader_close>;
    Handle h_;
};

/* Memory with the best page size allowed, populated as asked. */
class Region {
public:
    explicit Region(std::size_t size, const pw_region_options *options = nullptr) {
        pw_region *r = nullptr;
        detail::check(pw_region_new(size, options, &r));
        h_ = Handle(r);
    }
    void *data() const {
        void *p = nullptr;
        detail::check(pw_region_ptr(h_.get(), &p));
        return p;
    }
    std::size_t size() const {
        std::size_t n = 0;
        detail::check(pw_region_len(h_.get(), &n));
        return n;
    }
    /* What the kernel granted now; why is valid until this thread's next backing(). */
    pw_backing backing() const {
        pw_backing b{};
        detail::check(pw_region_backing(h_.get(), &b));
        return b;
    }
    void wait_populated(std::size_t n) const { detail::check(pw_region_wait_populated(h_.get(), n)); }
    pw_region *handle() const noexcept { return h_.get(); }

private:
    using Handle = detail::Owned<pw_region, pw_region_free>;
    Handle h_;
};

/* A growable buffer that keeps its pages. */
class Buffer {
public:
    explicit Buffer(std::size_t max, const pw_buffer_options *options = nullptr) {
        pw_buffer *b = nullptr;
        detail::check(pw_buffer_new(max, options, &b));
        h_ = Handle(b);
    }
    void resize(std::size_t len, int byte = 0) { detail::check(pw_buffer_resize(h_.get(), len, byte)); }
    void append(const void *data, std::size_t len) { detail::check(pw_buffer_append(h_.get(), data, len)); }
    void append(std::string_view bytes) { append(bytes.data(), bytes.size()); }
    /* Valid until the buffer grows past its reserved maximum. */
    void *data() {
        void *p = nullptr;
        detail::check(pw_buffer_ptr(h_.get(), &p));
        return p;
    }
    std::size_t size() const {
        std::size_t n = 0;
        detail::check(pw_buffer_len(h_.get(), &n));
        return n;
    }
    pw_buffer *handle() const noexcept { return h_.get(); }

private:
    using Handle = detail::Owned<pw_buffer, pw_buffer_free>;
    Handle h_;
};

} // namespace pagewise

#endif /* PAGEWISE_HPP */
