// Reading only regular files and replacing files whole; see files.h.
#include "reports/results/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "reports/results/error.h"

namespace sweep {
namespace {

// Removes the temporary file unless it was installed.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

// What a non-regular file is, for the message.
std::string kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a file";
}

}  // namespace

int open_regular_file(const std::string& path, const std::string& field, const std::string& hint) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait for one, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw UserError(path, 0, field, err == ENOENT ? std::string("no such file")
                                                  : std::string("cannot read: ") + std::strerror(err),
                    hint);
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = kind_of(st.st_mode);
    ::close(fd);
    throw UserError(path, 0, field, "not a regular file (" + kind + "): sweep reads only regular files", hint);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& field, const std::string& hint) {
  const int fd = open_regular_file(path, field, hint);
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw UserError(path, 0, field, std::string("cannot read: ") + std::strerror(err), hint);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

void make_output_directory(const std::filesystem::path& dir, const std::string& field) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto link = fs::symlink_status(dir, ec);
  if (fs::is_symlink(link) && !fs::exists(dir, ec)) {
    const fs::path target = fs::read_symlink(dir, ec);
    throw UserError(dir.string(), 0, field, "a link to " + target.string() + ", which does not exist",
                    "create " + target.string() + " first, or remove the link, or choose another directory");
  }
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UserError(dir.string(), 0, field, "not a directory", "choose a directory, or a name that is not taken");
  fs::create_directories(dir, ec);
  if (ec)
    throw UserError(dir.string(), 0, field, "cannot create the directory: " + ec.message(),
                    "choose a directory you can write to");
}

bool names_something(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found &&
         !ec;
}

void install_file(const std::filesystem::path& path, const std::string& text, const std::string& what,
                  const std::string& field, const std::string& hint,
                  const std::function<void(const std::string& written)>& check) {
  auto cannot_write = [&](int err) {
    throw UserError(path.string(), 0, field, "cannot write " + what + ": " + std::strerror(err), hint);
  };
  std::string name = (path.parent_path() / ("." + path.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(name.data());  // fills in the XXXXXX
  if (fd < 0) cannot_write(errno);
  TempFile tmp{name};
  // mkstemp creates the file for its owner only; ours are as readable as any other file.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      cannot_write(err);
    }
    done += static_cast<std::size_t>(n);
  }
  const int synced = ::fsync(fd) == 0 ? 0 : errno;
  const int closed = ::close(fd) == 0 ? 0 : errno;
  if (synced || closed) cannot_write(synced ? synced : closed);
  if (check) check(tmp.path);
  std::error_code ec;
  std::filesystem::rename(tmp.path, path, ec);
  if (ec) cannot_write(ec.value());
  tmp.keep = true;
}

}  // namespace sweep
