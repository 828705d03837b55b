# What repo2docker (mybinder.org) does with .binder/, replayed on the lab's Debian base image:
# tests/suite/test_binder_replay.py builds this with a context of `repo/` (the course, as a clone
# has it) and `ca/` (the host's local CAs, for pip behind a TLS-intercepting proxy).
#
# The steps and their users follow repo2docker's buildpacks (base.py, python/): apt.txt as
# root, the notebook user jovyan (uid 1000), requirements.txt with that user's pip,
# postBuild as that user in the repository's copy ($HOME), .binder/start as the entrypoint.
# What differs from Binder: Debian 12 instead of Ubuntu; Python 3.11 is Debian's in a venv
# instead of conda's; the pip step runs before the whole repository is copied (it reads only
# the two requirement files), so that editing the course does not reinstall the packages.
ARG BASE=labkit-base:bookworm
FROM ${BASE}
# on every layer, so that what this replay leaves in Docker's cache can be found
LABEL labkit.binder-replay=1

# What Binder's image has before it reads .binder/: a UTF-8 locale, bash, the notebook user,
# a Python 3.11 the user owns; the man page folder Java's packages expect (this minimal base
# has none). Replay only: the local CAs, trusted by apt and pip.
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8 SHELL=/bin/bash \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY ca/ /usr/local/share/ca-certificates/
RUN mkdir -p /usr/share/man/man1 \
 && apt-get -qq update \
 && apt-get -qq install --yes --no-install-recommends python3 python3-venv ca-certificates > /dev/null \
 && apt-get -qq clean && rm -rf /var/lib/apt/lists/* \
 && update-ca-certificates > /dev/null \
 && groupadd --gid 1000 jovyan \
 && useradd --comment "Default user" --create-home --gid 1000 --no-log-init --shell /bin/bash --uid 1000 jovyan \
 && install -o jovyan -g jovyan -d /srv/venv
ENV USER=jovyan HOME=/home/jovyan REPO_DIR=/home/jovyan \
    NB_PYTHON_PREFIX=/srv/venv KERNEL_PYTHON_PREFIX=/srv/venv \
    PATH=/home/jovyan/.local/bin:/srv/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# apt.txt, as root: repo2docker's command (comments stripped, names sorted)
COPY repo/.binder/apt.txt /tmp/binder-apt.txt
RUN apt-get -qq update \
 && apt-get install --yes --no-install-recommends $(sed 's/#.*//' /tmp/binder-apt.txt | sort) \
 && apt-get -qq purge && apt-get -qq clean && rm -rf /var/lib/apt/lists/*

# The notebook environment repo2docker makes before it reads requirements.txt (its conda
# environment for Python 3.11: JupyterLab 4, Notebook 7, Jupyter Server 2, JupyterHub's
# single-user server 5, ipywidgets 8, resource usage, offline notebook), here from PyPI, so
# that the lock below is installed over what Binder already has, as it is there
USER jovyan
WORKDIR /home/jovyan
RUN python3 -m venv /srv/venv \
 && pip install --no-cache-dir -q --disable-pip-version-check --upgrade pip \
 && pip install --no-cache-dir -q "jupyterlab==4.*" "notebook==7.*" "jupyter_server==2.*" "jupyterhub==5.*" \
        "ipywidgets==8.*" "jupyter-resource-usage==1.*" "jupyter-offlinenotebook==0.3.*"

# requirements.txt, as the notebook user: repo2docker's command
COPY --chown=jovyan:jovyan repo/requirements/lock.txt requirements/lock.txt
COPY --chown=jovyan:jovyan repo/.binder/requirements.txt .binder/requirements.txt
RUN ${KERNEL_PYTHON_PREFIX}/bin/pip install --no-cache-dir -r ".binder/requirements.txt"

# the repository, then postBuild as the notebook user in it
USER root
COPY --chown=jovyan:jovyan repo/ /home/jovyan/
USER jovyan
RUN chmod +x .binder/postBuild && ./.binder/postBuild
ENTRYPOINT ["/home/jovyan/.binder/start"]
CMD ["jupyter", "lab", "--ip", "127.0.0.1"]
